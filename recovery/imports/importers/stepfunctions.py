"""AWS Step Functions' GetExecutionHistory JSON to a turn journal (imports.md; docs/imports.md has the table).

One run per execution, one turn per state entered (``state:<eventId>``, lineage ``stepfunctions:<state
name>``, phases ``enter``, ``exit``). A task (TaskScheduled, LambdaFunctionScheduled, ActivityScheduled) is
an intent of the state it runs in; its readbacks are found by walking ``previousEventId`` back to the
event that scheduled it, and a state's exit or abort by walking back to the state entered it closes
(Parallel and Map branches interleave, so file order alone would pair the wrong events).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from engine.assess import valid_at

from ._common import EffectMap, Journal, Progress, refuse, value_digest

PHASES = ["enter", "exit"]

_SCHEDULED = {"TaskScheduled": "Task", "LambdaFunctionScheduled": "LambdaFunction", "ActivityScheduled": "Activity"}
_READBACK = {
    "TaskSucceeded": "succeeded",
    "TaskFailed": "failed",
    "TaskStartFailed": "failed",
    "TaskSubmitFailed": "failed",
    "TaskTimedOut": "unknown",
    "LambdaFunctionSucceeded": "succeeded",
    "LambdaFunctionFailed": "failed",
    "LambdaFunctionScheduleFailed": "failed",
    "LambdaFunctionStartFailed": "failed",
    "LambdaFunctionTimedOut": "unknown",
    "ActivitySucceeded": "succeeded",
    "ActivityFailed": "failed",
    "ActivityScheduleFailed": "failed",
    "ActivityTimedOut": "unknown",
}
_EXECUTION_END = {
    "ExecutionSucceeded": "completed",
    "ExecutionFailed": "failed",
    "ExecutionTimedOut": "failed",
    "ExecutionAborted": "cancelled",
}
# Events that journal nothing: a task's progress between scheduling and its result, the execution's
# start, and the bookkeeping of Parallel and Map states (their branches' states are turns of their own).
_SKIPPED = frozenset(
    {
        "ExecutionStarted",
        "TaskStarted",
        "TaskSubmitted",
        "LambdaFunctionStarted",
        "ActivityStarted",
        "ParallelStateStarted",
        "ParallelStateSucceeded",
        "ParallelStateFailed",
        "MapStateStarted",
        "MapStateSucceeded",
        "MapStateFailed",
        "MapIterationStarted",
        "MapIterationSucceeded",
        "MapIterationFailed",
        "MapIterationAborted",
        "MapRunStarted",
        "MapRunSucceeded",
        "MapRunFailed",
        "MapRunAborted",
    }
)
_FAMILY = {t: fam for fam in ("Task", "LambdaFunction", "Activity") for t in _READBACK if t.startswith(fam)}


def _details_key(event_type: str) -> str:
    """``TaskStateEntered`` -> ``stateEnteredEventDetails``: every state's entered / exited / aborted event
    shares one details object; others are named after their own type."""
    for suffix, key in (("StateEntered", "stateEnteredEventDetails"), ("StateExited", "stateExitedEventDetails")):
        if event_type.endswith(suffix):
            return key
    return event_type[:1].lower() + event_type[1:] + "EventDetails"


def _at(raw: Any, eid: int) -> str | None:
    """The event's ``timestamp``: RFC 3339 as the CLI prints it, or the API's epoch seconds (kept to the
    millisecond, written in UTC)."""
    if raw is None:
        return None
    if isinstance(raw, str):
        if not valid_at(raw):
            raise refuse(f"event {eid}: timestamp is not an RFC 3339 time")
        return raw
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        millis = round(raw * 1000)
        try:
            stamp = datetime.fromtimestamp(millis // 1000, UTC)
        except (OverflowError, OSError, ValueError):
            raise refuse(f"event {eid}: timestamp is out of range") from None
        return stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis % 1000:03d}Z"
    raise refuse(f"event {eid}: timestamp is neither a time nor a number")


class _State:
    __slots__ = ("turn", "open_tasks", "closed")

    def __init__(self, turn: str) -> None:
        self.turn = turn
        self.open_tasks: list[str] = []
        self.closed = False


def _events_by_id(data: bytes) -> dict[int, dict[str, Any]]:
    """The history's events by id, refused unless it is one whole page whose ids are exactly 1..n and
    whose first event starts the execution."""
    try:
        top = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise refuse("not JSON") from None
    if not isinstance(top, dict) or not isinstance(top.get("events"), list):
        raise refuse('not an object with an "events" array')
    if top.get("nextToken"):
        raise refuse("one page of a longer history (nextToken is set): fetch every page")
    by_id: dict[int, dict[str, Any]] = {}
    for event in top["events"]:
        if not isinstance(event, dict):
            raise refuse("an element of events is not an object")
        eid = event.get("id")
        if type(eid) is not int:
            raise refuse("an event has no integer id")
        if eid in by_id:
            raise refuse(f"event {eid} appears twice")
        if not isinstance(event.get("type"), str):
            raise refuse(f"event {eid} has no type")
        prev = event.get("previousEventId")
        if prev is not None and type(prev) is not int:
            raise refuse(f"event {eid}: previousEventId is not an integer")
        by_id[eid] = event
    ids = sorted(by_id)
    if ids != list(range(1, len(ids) + 1)):
        raise refuse("the event ids, in order, are not exactly 1..n")
    if by_id[1]["type"] != "ExecutionStarted":
        raise refuse("event 1 is not ExecutionStarted")
    return by_id


class _Converter:
    """docs/imports.md's table, one event at a time in id order, into a Journal."""

    def __init__(self, by_id: dict[int, dict[str, Any]], effects: EffectMap, run: str) -> None:
        self.by_id = by_id
        self.effects = effects
        self.j = Journal(run)
        self.skipped: dict[str, int] = {}
        self.states: dict[int, _State] = {}  # entered event id -> its turn
        self.tasks: dict[int, tuple[str, _State]] = {}  # scheduled event id -> (intent, state)
        self.open_states: list[int] = []  # entered ids, in order, not yet closed
        self.ended = False

    def walk_back(self, eid: int, wanted: set[str] | None, state_name: str | None) -> int | None:
        """The nearest event before ``eid`` along previousEventId that is a scheduling event of the
        ``wanted`` types, or (``wanted`` None) the state entered event that ``state_name``'s exit closes:
        states entered and closed in between (a Parallel's branches) are stepped over in pairs."""
        by_id = self.by_id
        depth = 0
        seen = 0
        cur = by_id[eid].get("previousEventId")
        while type(cur) is int and cur in by_id and seen <= len(by_id):
            seen += 1
            kind = by_id[cur]["type"]
            if wanted is not None:
                if kind in wanted:
                    return cur
            elif kind.endswith(("StateExited", "StateAborted")):
                depth += 1
            elif kind.endswith("StateEntered"):
                if depth == 0:
                    entered = by_id[cur].get("stateEnteredEventDetails")
                    name = entered.get("name") if isinstance(entered, dict) else None
                    if state_name is None or name == state_name:
                        return cur
                    return None
                depth -= 1
            cur = by_id[cur].get("previousEventId")
        return None

    def observe(self, state: _State, intent: str, outcome: str, at: str | None, eid: int) -> None:
        self.j.add("effect_observed", at, eid, {"turn": state.turn, "intent": intent, "outcome": outcome})
        if intent in state.open_tasks:
            state.open_tasks.remove(intent)

    def close(self, state: _State, status: str, at: str | None, eid: int) -> None:
        for intent in list(state.open_tasks):  # still open when its state or the execution ended
            self.observe(state, intent, "unknown", at, eid)
        self.j.add("turn_terminal", at, eid, {"turn": state.turn, "status": status})
        state.closed = True

    def feed(self, eid: int) -> None:
        event = self.by_id[eid]
        kind: str = event["type"]
        at = _at(event.get("timestamp"), eid)
        details = event.get(_details_key(kind))
        details = details if isinstance(details, dict) else {}
        if self.ended:
            self.j.add("stepfunctions." + kind, at, eid, {})  # anything after the end: blocks until someone looks
        elif kind.endswith("StateEntered"):
            self.state_entered(eid, kind, details, at)
        elif kind.endswith(("StateExited", "StateAborted")):
            self.state_closed(eid, kind, event, at)
        elif kind in _SCHEDULED:
            self.task_scheduled(eid, kind, details, at)
        elif kind in _READBACK:
            self.task_read_back(eid, kind, at)
        elif kind in _EXECUTION_END:
            for entered_id in list(self.open_states):
                self.close(self.states[entered_id], _EXECUTION_END[kind], at, eid)
            self.open_states.clear()
            self.ended = True
        elif kind in _SKIPPED:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
        else:
            # Not in the table (a redrive, a newer event type): the engine does not know the kind, so the
            # run blocks until someone looks.
            self.j.add("stepfunctions." + kind, at, eid, {})

    def state_entered(self, eid: int, kind: str, details: dict[str, Any], at: str | None) -> None:
        name = details.get("name")
        if not isinstance(name, str) or not name:
            raise refuse(f"event {eid}: {kind} names no state")
        state = self.states[eid] = _State(f"state:{eid}")
        self.open_states.append(eid)
        lineage = "stepfunctions:" + name
        self.j.add("turn_planned", at, eid, {"turn": state.turn, "lineage": lineage, "phases": PHASES})
        self.j.add("phase_committed", at, eid, {"turn": state.turn, "phase": "enter"})

    def state_closed(self, eid: int, kind: str, event: dict[str, Any], at: str | None) -> None:
        """A state's exit (its turn completed) or abort (cancelled), paired with the entry it closes."""
        exited = event.get("stateExitedEventDetails")
        name = exited.get("name") if isinstance(exited, dict) else None
        entered_id = self.walk_back(eid, None, name if isinstance(name, str) else None)
        state = self.states.get(entered_id) if entered_id is not None else None
        if entered_id is None or state is None or state.closed:
            raise refuse(f"event {eid}: {kind} closes no open state")
        if kind.endswith("StateExited"):
            self.j.add("phase_committed", at, eid, {"turn": state.turn, "phase": "exit"})
            self.close(state, "completed", at, eid)
        else:
            self.close(state, "cancelled", at, eid)
        self.open_states.remove(entered_id)

    def task_scheduled(self, eid: int, kind: str, details: dict[str, Any], at: str | None) -> None:
        """A task is an intent of the state it runs in, classified by its resource, type or state name."""
        entered_id = self.walk_back(eid, None, None)
        state = self.states.get(entered_id) if entered_id is not None else None
        if entered_id is None or state is None or state.closed:
            raise refuse(f"event {eid}: {kind} is in no open state")
        state_name = None
        entered = self.by_id[entered_id].get("stateEnteredEventDetails")
        if isinstance(entered, dict) and isinstance(entered.get("name"), str):
            state_name = entered["name"]
        resource = details.get("resource") if isinstance(details.get("resource"), str) else None
        resource_type = details.get("resourceType") if isinstance(details.get("resourceType"), str) else None
        cls, decided = self.effects.first((resource, resource_type, state_name))
        intent = f"task:{eid}"
        fields: dict[str, Any] = {"turn": state.turn, "intent": intent, "effect_class": cls}
        if cls == "idempotent":
            fields["idempotency_key"] = f"{self.j.run}/task/{eid}"
        if resource is not None:
            fields["resource"] = resource
        if resource_type is not None:
            fields["resource_type"] = resource_type
        for arg in ("parameters", "input"):
            if details.get(arg) is not None:
                fields["args_digest"] = value_digest(details[arg])
                break
        self.j.add("intent_dispatched", at, eid, fields)
        self.j.decided_by[intent] = decided
        self.tasks[eid] = (intent, state)
        state.open_tasks.append(intent)

    def task_read_back(self, eid: int, kind: str, at: str | None) -> None:
        """A task's result, paired with the scheduling event of its own family."""
        family = _FAMILY[kind]
        scheduled = self.walk_back(eid, {k for k, f in _SCHEDULED.items() if f == family}, None)
        found = self.tasks.get(scheduled) if scheduled is not None else None
        if found is None:
            raise refuse(f"event {eid}: {kind} follows no scheduled task")
        intent, state = found
        self.observe(state, intent, _READBACK[kind], at, eid)


def convert(
    data: bytes, *, effects: EffectMap, run: str | None, file_sha: str, progress: Progress | None
) -> tuple[Journal, dict[str, int], int]:
    by_id = _events_by_id(data)
    converter = _Converter(by_id, effects, run or "stepfunctions-" + file_sha[:16])
    total = len(by_id)
    for eid in range(1, total + 1):
        converter.feed(eid)
        if progress is not None and eid % 1024 == 0:
            progress(eid, total)
    if progress is not None:
        progress(total, total)
    return converter.j, converter.skipped, total


__all__ = ["convert"]
