"""Builders for hand-written histories in each source's documented shape, and the two stable commands run
in this process (import_history, then assess_journal on what it wrote)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import assess
from recovery.imports.importers import ClassMap, ImportResult, effect_map_parse, history_import
from recovery.management.commands.assess_journal import Command as AssessCommand
from recovery.management.commands.import_history import Command as ImportCommand

# Payload contents a history holds: none may reach a journal (base64 as Temporal keeps it, and plain).
SECRET = "card-4242-4242-secret"
SECRET_B64 = "Y2FyZC00MjQyLTQyNDItc2VjcmV0"
PAYLOAD = {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": SECRET_B64}]}


def screaming(name: str) -> str:
    """ActivityTaskScheduled -> EVENT_TYPE_ACTIVITY_TASK_SCHEDULED."""
    return "EVENT_TYPE_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


class History:
    """A Temporal history, event by event, as `temporal workflow show --output json` prints it."""

    def __init__(self, workflow_type: str = "OrderWorkflow", run_id: str | None = "run-abc", **started: Any) -> None:
        self.events: list[dict[str, Any]] = []
        attrs: dict[str, Any] = {"workflowType": {"name": workflow_type}, "input": PAYLOAD, **started}
        if run_id is not None:
            attrs["originalExecutionRunId"] = run_id
        self.add("WorkflowExecutionStarted", **attrs)

    def add(self, event_type: str, **attrs: Any) -> int:
        eid = len(self.events) + 1
        self.events.append(
            {
                "eventId": eid,
                "eventTime": f"2026-03-01T10:{eid // 60 % 60:02d}:{eid % 60:02d}.123456789Z",
                "eventType": event_type,
                "taskId": str(1048576 + eid),
                event_type[:1].lower() + event_type[1:] + "EventAttributes": attrs,
            }
        )
        return eid

    def activity(self, activity_id: str, activity_type: str = "ChargeCard") -> int:
        return self.add(
            "ActivityTaskScheduled",
            activityId=activity_id,
            activityType={"name": activity_type},
            taskQueue={"name": "orders", "kind": "TASK_QUEUE_KIND_NORMAL"},
            input=PAYLOAD,
            scheduleToCloseTimeout="30s",
            retryPolicy={"initialInterval": "1s", "backoffCoefficient": 2.0, "maximumAttempts": 3},
        )

    def workflow_task(self) -> None:
        scheduled = self.add("WorkflowTaskScheduled", taskQueue={"name": "orders"}, startToCloseTimeout="10s")
        started = self.add("WorkflowTaskStarted", scheduledEventId=str(scheduled), identity="worker@host")
        self.add("WorkflowTaskCompleted", scheduledEventId=str(scheduled), startedEventId=str(started))

    def data(
        self, *, spelling: str = "pascal", ids: str = "int", wrap: bool = False, order: list[int] | None = None
    ) -> bytes:
        events = []
        for event in self.events:
            event = dict(event)
            if spelling == "screaming":
                event["eventType"] = screaming(event["eventType"])
            if ids == "str":
                event["eventId"] = str(event["eventId"])
            events.append(event)
        if order is not None:
            events = [events[i] for i in order]
        top: dict[str, Any] = {"history": {"events": events}} if wrap else {"events": events}
        return json.dumps(top, indent=2).encode()


def imported(source: str, data: bytes, effects: dict[str, str] | None = None, run: str | None = None) -> ImportResult:
    return history_import(source=source, data=data, effects=effect_map_parse(effects or {}), run=run)


def lines(journal: bytes) -> list[bytes]:
    return journal.rstrip(b"\n").split(b"\n") if journal else []


def records(journal: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines(journal)]


def decisions(journal: bytes) -> dict[str, Any]:
    """The engine's answer for a journal, as assess_journal --json prints it."""
    return assess(lines(journal)).to_dict()


def turn(journal: bytes, name: str | None = None) -> dict[str, Any]:
    answer = decisions(journal)
    assert answer["violations"] == [], answer["violations"]
    turns = {t["turn"]: t for t in answer["turns"]}
    return turns[name] if name is not None else answer["turns"][0]


def intents(t: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {i["intent"]: (i["effect_class"], i["resolution"]) for i in t["intents"]}


def assert_no_payload(journal: bytes, *secrets: str) -> None:
    for secret in (SECRET, SECRET_B64, *secrets):
        assert secret.encode() not in journal


def run_import(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return _run(ImportCommand(), "import_history", capsys, args)


def run_assess(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code, out, err = _run(AssessCommand(), "assess_journal", capsys, (str(path), "--json"))
    assert (code, err) == (0, ""), err
    answer: dict[str, Any] = json.loads(out)
    return answer


def _run(command: Any, name: str, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> tuple[int, str, str]:
    code = 0
    try:
        command.run_from_argv(["manage.py", name, *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def effects(obj: dict[str, str]) -> ClassMap:
    return effect_map_parse(obj)
