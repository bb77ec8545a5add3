"""A hand-written Temporal history in the JSON that `temporal workflow show --output json` prints (docs/imports.md's
table): a workflow that charges a card (an activity that timed out), sends a receipt (completed)
and runs a lookup (completed), with workflow tasks and a timer in between (skipped)."""

from __future__ import annotations

import json
from typing import Any

RUN_ID = "4d6f0c2a-8a3e-4e0b-9d55-0c1f2a3b4c5d"
RUN = f"temporal-{RUN_ID}"
SECRET = "4242-4242-4242-4242"  # a card number in a payload: it must never reach the store


def _payload(value: Any) -> dict[str, Any]:
    import base64

    data = base64.b64encode(json.dumps(value).encode()).decode()
    return {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": data}]}


def _event(event_id: int, kind: str, attributes: dict[str, Any], *, spelled: str | None = None) -> dict[str, Any]:
    name = kind[0].lower() + kind[1:] + "EventAttributes"
    return {
        "eventId": str(event_id),
        "eventTime": f"2026-11-30T10:00:{event_id:02d}Z",
        "eventType": spelled or kind,
        name: attributes,
    }


def history(*, run_id: str = RUN_ID, workflow_type: str = "ChargeOrder", close: bool = False) -> dict[str, Any]:
    """The history; ``close`` adds a completed workflow execution at the end."""
    events = [
        _event(
            1,
            "WorkflowExecutionStarted",
            {
                "workflowType": {"name": workflow_type},
                "taskQueue": {"name": "orders"},
                "input": _payload({"card": SECRET}),
                "originalExecutionRunId": run_id,
                "firstExecutionRunId": run_id,
            },
        ),
        _event(
            2, "WorkflowTaskScheduled", {"taskQueue": {"name": "orders"}}, spelled="EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
        ),
        _event(3, "WorkflowTaskStarted", {"scheduledEventId": "2"}),
        _event(4, "WorkflowTaskCompleted", {"scheduledEventId": "2", "startedEventId": "3"}),
        _event(
            5,
            "ActivityTaskScheduled",
            {"activityId": "1", "activityType": {"name": "ChargeCard"}, "input": _payload({"card": SECRET})},
        ),
        _event(6, "ActivityTaskStarted", {"scheduledEventId": "5", "attempt": 1}),
        _event(7, "ActivityTaskTimedOut", {"scheduledEventId": "5", "startedEventId": "6"}),
        _event(
            8,
            "ActivityTaskScheduled",
            {"activityId": "2", "activityType": {"name": "SendReceipt"}},
            spelled="EVENT_TYPE_ACTIVITY_TASK_SCHEDULED",
        ),
        _event(9, "ActivityTaskStarted", {"scheduledEventId": "8"}),
        _event(10, "ActivityTaskCompleted", {"scheduledEventId": "8", "result": _payload("ok")}),
        _event(11, "TimerStarted", {"timerId": "t1", "startToFireTimeout": "1.5s"}),
        _event(12, "TimerFired", {"timerId": "t1", "startedEventId": "11"}),
        _event(13, "ActivityTaskScheduled", {"activityId": "3", "activityType": {"name": "LookupOrder"}}),
        _event(14, "ActivityTaskCompleted", {"scheduledEventId": "13"}),
    ]
    if close:
        events.append(_event(15, "WorkflowExecutionCompleted", {"result": _payload("done")}))
    return {"events": events}


def history_bytes(**kwargs: Any) -> bytes:
    return json.dumps(history(**kwargs), indent=2).encode()
