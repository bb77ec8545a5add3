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

from ._common import ClassMap, Journal, Progress, refuse, value_digest

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
# Every state type AWS writes, and the events each has (botocore's HistoryEventType).
_STATE_TYPES = ("Choice", "Fail", "Map", "Parallel", "Pass", "Succeed", "Task", "Wait")
_ENTERED = {t + "StateEntered": t for t in _STATE_TYPES}
_EXITED = {t + "StateExited": t for t in _STATE_TYPES if t != "Fail"}
_ABORTED = {t + "StateAborted": t for t in ("Map", "Parallel", "Task", "Wait")}
_SCOPES = frozenset({"Map", "Parallel"})
# Events that journal nothing: a task's progress between scheduling and its result, the execution's
# start, the bookkeeping of Parallel and Map states (their branches' states are turns of their own), a
# distributed Map's run (its child executions are other histories), and a JSONata expression that failed
# to evaluate (no effect: what the state does next, an exit, an abort or the execution's end, is journaled).
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
        "MapRunRedriven",
        "EvaluationFailed",
    }
)
# Every type of AWS's HistoryEventType list this table maps (tests hold it equal to botocore's).
KNOWN_TYPES = frozenset(
    {*_SCHEDULED, *_READBACK, *_EXECUTION_END, *_ENTERED, *_EXITED, *_ABORTED, *_SKIPPED, "ExecutionRedriven"}
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
    __slots__ = ("turn", "type", "name", "parent", "open_tasks", "closed")

    def __init__(self, turn: str, type_: str, name: str, parent: int | None) -> None:
        self.turn = turn
        self.type = type_
        self.name = name
        self.parent = parent  # the entered id of the Map or Parallel state it runs in, None at the top
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

    def __init__(self, by_id: dict[int, dict[str, Any]], effects: ClassMap, run: str) -> None:
        self.by_id = by_id
        self.effects = effects
        self.j = Journal(run)
        self.skipped: dict[str, int] = {}
        self.states: dict[int, _State] = {}  # entered event id -> its turn
        self.tasks: dict[int, tuple[str, _State]] = {}  # scheduled event id -> (intent, state)
        self.open_states: list[int] = []  # entered ids, in order, not yet closed
        self.ended: str | None = None  # the execution's end event type, once it ended

    def chain(self, eid: int) -> list[int]:
        """The events before ``eid`` along previousEventId, nearest first (AWS writes 0 for none)."""
        by_id = self.by_id
        out: list[int] = []
        cur = by_id[eid].get("previousEventId")
        while type(cur) is int and cur in by_id and cur < eid and len(out) < len(by_id):
            out.append(cur)
            cur = by_id[cur].get("previousEventId")
        return out

    def open_on_chain(self, eid: int, type_: str | None = None, name: str | None = None) -> int | None:
        """The nearest state entered along ``eid``'s chain that is still open (of that type and name when
        given). States already closed are stepped over: a branch's states, or a concurrent iteration's
        state the chain runs through (AWS points every abort of a Map at the iteration that failed)."""
        for cur in self.chain(eid):
            state = self.states.get(cur)
            if state is None or state.closed:
                continue
            if (type_ is None or state.type == type_) and (name is None or state.name == name):
                return cur
        return None

    def within(self, entered_id: int, scope: int | None) -> bool:
        """Whether the state runs, at any depth, inside the Map or Parallel state ``scope`` (None: the top)."""
        if scope is None:
            return True
        parent = self.states[entered_id].parent
        while parent is not None:
            if parent == scope:
                return True
            parent = self.states[parent].parent
        return False

    def observe(self, state: _State, intent: str, outcome: str, at: str | None, eid: int) -> None:
        self.j.add("effect_observed", at, eid, {"turn": state.turn, "intent": intent, "outcome": outcome})
        if intent in state.open_tasks:
            state.open_tasks.remove(intent)

    def close(self, entered_id: int, status: str, at: str | None, eid: int) -> None:
        """The state's turn ends: the states still open inside it (a Map's or Parallel's) are cancelled
        first, then its own open tasks are unknown, then its terminal record."""
        for inner in [i for i in self.open_states if i != entered_id and self.within(i, entered_id)]:
            if not self.states[inner].closed:
                self.close(inner, "cancelled", at, eid)
        state = self.states[entered_id]
        for intent in list(state.open_tasks):  # still open when its state or the execution ended
            self.observe(state, intent, "unknown", at, eid)
        self.j.add("turn_terminal", at, eid, {"turn": state.turn, "status": status})
        state.closed = True
        self.open_states.remove(entered_id)

    def feed(self, eid: int) -> None:
        event = self.by_id[eid]
        kind: str = event["type"]
        at = _at(event.get("timestamp"), eid)
        details = event.get(_details_key(kind))
        details = details if isinstance(details, dict) else {}
        if self.ended is not None:
            if kind == "ExecutionRedriven" and self.ended != "ExecutionSucceeded":
                self.ended = None  # a redrive: the execution goes on from the state that failed
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
            else:
                self.j.add("stepfunctions." + kind, at, eid, {})  # anything else after the end blocks
        elif kind in _ENTERED:
            self.state_entered(eid, kind, details, at)
        elif kind in _EXITED:
            self.state_exited(eid, kind, details, at)
        elif kind in _ABORTED:
            self.state_aborted(eid, kind, at)
        elif kind in _SCHEDULED:
            self.task_scheduled(eid, kind, details, at)
        elif kind in _READBACK:
            self.task_read_back(eid, kind, at)
        elif kind in _EXECUTION_END:
            for entered_id in list(self.open_states):
                if not self.states[entered_id].closed:
                    self.close(entered_id, _EXECUTION_END[kind], at, eid)
            self.ended = kind
        elif kind in _SKIPPED:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
        else:
            # Not in the table (a redrive of a running execution, a newer event type): the engine does not
            # know the kind, so the run blocks until someone looks.
            self.j.add("stepfunctions." + kind, at, eid, {})

    def state_entered(self, eid: int, kind: str, details: dict[str, Any], at: str | None) -> None:
        name = details.get("name")
        if not isinstance(name, str) or not name:
            raise refuse(f"event {eid}: {kind} names no state")
        parent = None
        for cur in self.chain(eid):  # the Map or Parallel state it runs in: the nearest open one before it
            outer = self.states.get(cur)
            if outer is not None and not outer.closed and outer.type in _SCOPES:
                parent = cur
                break
        type_ = _ENTERED[kind]
        state = self.states[eid] = _State(f"state:{eid}", type_, name, parent)
        self.open_states.append(eid)
        lineage = "stepfunctions:" + name
        self.j.add("turn_planned", at, eid, {"turn": state.turn, "lineage": lineage, "phases": PHASES})
        self.j.add("phase_committed", at, eid, {"turn": state.turn, "phase": "enter"})
        if type_ == "Fail":  # a Fail state ends where it starts: AWS writes no exit for it
            self.close(eid, "failed", at, eid)

    def state_exited(self, eid: int, kind: str, details: dict[str, Any], at: str | None) -> None:
        """A state's exit (its turn completed), paired with the open entry of its type and name along the
        chain."""
        name = details.get("name")
        entered_id = self.open_on_chain(eid, _EXITED[kind], name if isinstance(name, str) else None)
        if entered_id is None:
            raise refuse(f"event {eid}: {kind} closes no open state")
        self.j.add("phase_committed", at, eid, {"turn": self.states[entered_id].turn, "phase": "exit"})
        self.close(entered_id, "completed", at, eid)

    def state_aborted(self, eid: int, kind: str, at: str | None) -> None:
        """A state cancelled round it (its Map or Parallel failed). The abort names no state, and AWS points
        each abort of a Map's iterations at the event that failed the Map, so: the nearest open state of
        its type along the chain (not one with states still open inside it), else the first entered open
        state of its type inside the nearest open Map or Parallel state along the chain, else the first
        open state of its type."""
        type_ = _ABORTED[kind]
        entered_id = self.open_on_chain(eid, type_)
        if entered_id is not None and any(i != entered_id and self.within(i, entered_id) for i in self.open_states):
            entered_id = None  # a Map or Parallel round states still open: AWS aborts the inner ones first
        if entered_id is None:
            scopes: list[int | None] = [c for c in self.chain(eid) if c in self.states and not self.states[c].closed]
            for scope in [*scopes, None]:
                found = [
                    i
                    for i in self.open_states
                    if self.states[i].type == type_
                    and self.within(i, scope)
                    and not any(k != i and self.within(k, i) for k in self.open_states)
                ]
                if found:
                    entered_id = found[0]
                    break
        if entered_id is None:
            raise refuse(f"event {eid}: {kind} closes no open state")
        self.close(entered_id, "cancelled", at, eid)

    def task_scheduled(self, eid: int, kind: str, details: dict[str, Any], at: str | None) -> None:
        """A task is an intent of the state it runs in, classified by its resource, type or state name."""
        entered_id = self.open_on_chain(eid)
        if entered_id is None:
            raise refuse(f"event {eid}: {kind} is in no open state")
        state = self.states[entered_id]
        resource = details.get("resource") if isinstance(details.get("resource"), str) else None
        resource_type = details.get("resourceType") if isinstance(details.get("resourceType"), str) else None
        cls, decided = self.effects.first((resource, resource_type, state.name))
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
        """A task's result, paired with the nearest scheduling event of its own family along the chain
        whose task is still open (else the nearest one: a second readback of it)."""
        family = _FAMILY[kind]
        wanted = {k for k, f in _SCHEDULED.items() if f == family}
        candidates = [c for c in self.chain(eid) if self.by_id[c]["type"] in wanted and c in self.tasks]
        found = None
        for c in candidates:
            intent, state = self.tasks[c]
            if intent in state.open_tasks:
                found = self.tasks[c]
                break
        if found is None and candidates:
            found = self.tasks[candidates[0]]
        if found is None:
            raise refuse(f"event {eid}: {kind} follows no scheduled task")
        intent, state = found
        if state.closed:
            raise refuse(f"event {eid}: {kind} reads back a task of a state already closed")
        self.observe(state, intent, _READBACK[kind], at, eid)


def _origin(started: dict[str, Any]) -> dict[str, str]:
    """What the started event names of the execution: the state machine's version or alias ARN when it ran
    one. The history never names the execution's own ARN (the command was given it, the file does not
    hold it)."""
    details = started.get("executionStartedEventDetails")
    found: dict[str, str] = {}
    if isinstance(details, dict):
        for key, name in (
            ("stateMachineVersionArn", "state_machine_version_arn"),
            ("stateMachineAliasArn", "state_machine_alias_arn"),
        ):
            value = details.get(key)
            if isinstance(value, str) and value:
                found[name] = value
    return found


def convert(
    data: bytes, *, effects: ClassMap, run: str | None, file_sha: str, progress: Progress | None
) -> tuple[Journal, dict[str, int], int]:
    by_id = _events_by_id(data)
    converter = _Converter(by_id, effects, run or "stepfunctions-" + file_sha[:16])
    converter.j.origin.update(_origin(by_id[1]))
    total = len(by_id)
    for eid in range(1, total + 1):
        converter.feed(eid)
        if progress is not None and eid % 1024 == 0:
            progress(eid, total)
    if progress is not None:
        progress(total, total)
    return converter.j, converter.skipped, total


__all__ = ["convert"]
