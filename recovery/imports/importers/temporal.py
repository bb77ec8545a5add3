"""Temporal's workflow history JSON to a turn journal, event by event (imports.md, "Temporal").

Bounded memory: the file is never parsed whole (a 50 MB history's objects would take several times its
size). The ``events`` array is split into its elements, each parsed alone with orjson and dropped once
journaled, so that what is held is the file's bytes, one event, and the journal being written. An element
ends at the first ``}`` before a ``,`` or ``]`` where its braces and brackets balance and orjson reads it
whole (a brace inside a string makes the count balance early: orjson then refuses the cut and the next
candidate is tried). What lies round the array is parsed with the array emptied, so the file as a whole is
still checked to be one JSON object with the array where docs/imports.md says.

Events are taken in ``eventId`` order. They nearly always come in that order already and are journaled
as they are read; the first event out of place sends the import to a second pass that collects every
event's id and place, sorts them and journals from the start.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from engine.assess import valid_at

from ._common import ClassMap, ImportRefused, Journal, Progress, refuse, value_digest

TURN = "workflow"
PHASES = ["start", "close"]

_ARRAY = re.compile(rb'"events"\s*:\s*\[')
_CANDIDATE = re.compile(rb"\}\s*[,\]]")
_WS = b" \t\r\n"
_FAST_TRIES = 256
_DECIMAL = re.compile(r"[0-9]+")
_SECONDS = re.compile(r"[0-5][0-9](\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])")

# Events that journal nothing (counted in `skipped`), as the last-but-one row of docs/imports.md's table lists them.
_SKIPPED_EXACT = frozenset(
    {
        "WorkflowExecutionSignaled",
        "WorkflowExecutionCancelRequested",
        "WorkflowExecutionOptionsUpdated",
        "UpsertWorkflowSearchAttributes",
        "WorkflowPropertiesModified",
        "ActivityTaskStarted",
        "ActivityTaskCancelRequested",
        "ChildWorkflowExecutionStarted",
        "NexusOperationStarted",
    }
)
_SKIPPED_PREFIXES = ("WorkflowTask", "Timer", "WorkflowExecutionUpdate", "NexusOperationCancelRequested")

_CHILD_CLOSED = {
    "ChildWorkflowExecutionCompleted": "succeeded",
    "StartChildWorkflowExecutionFailed": "failed",
    "ChildWorkflowExecutionFailed": "failed",
    "ChildWorkflowExecutionCanceled": "failed",
    "ChildWorkflowExecutionTimedOut": "failed",
    "ChildWorkflowExecutionTerminated": "failed",
}
_WORKFLOW_CLOSED = {
    "WorkflowExecutionCompleted": "completed",
    "WorkflowExecutionContinuedAsNew": "completed",
    "WorkflowExecutionFailed": "failed",
    "WorkflowExecutionTimedOut": "failed",
    "WorkflowExecutionCanceled": "cancelled",
    "WorkflowExecutionTerminated": "cancelled",
}
_SCHEDULED_CLOSED: dict[str, str | None] = {
    "ActivityTaskCompleted": "succeeded",
    "ActivityTaskFailed": "failed",
    "ActivityTaskTimedOut": "unknown",
    "ActivityTaskCanceled": None,
    "NexusOperationCompleted": "succeeded",
    "NexusOperationFailed": "failed",
    "NexusOperationTimedOut": "unknown",
    "NexusOperationCanceled": None,
}
_LOCAL_MARKERS = ("LocalActivity", "core_local_activity")
_JSON_PLAIN = "json/plain"

_NAME_CACHE: dict[str, str] = {}


def event_type_name(spelled: str) -> str:
    """``EVENT_TYPE_ACTIVITY_TASK_SCHEDULED`` -> ``ActivityTaskScheduled``; the other spelling as it is."""
    name = _NAME_CACHE.get(spelled)
    if name is None:
        if spelled.startswith("EVENT_TYPE_"):
            name = "".join(word.capitalize() for word in spelled[len("EVENT_TYPE_") :].split("_"))
        else:
            name = spelled
        if len(_NAME_CACHE) < 512:
            _NAME_CACHE[spelled] = name
    return name


def _attributes_key(name: str) -> str:
    return name[:1].lower() + name[1:] + "EventAttributes"


def _event_id(event: Any) -> int:
    if not isinstance(event, dict):
        raise refuse("an element of events is not an object")
    raw = event.get("eventId")
    if type(raw) is int:
        return raw
    if type(raw) is str and raw.isascii() and raw.isdigit():
        return int(raw)
    raise refuse("an event has no eventId that is an integer or a decimal string")


# -- splitting the file -----------------------------------------------------------------------------------


def _skip_ws(data: Any, pos: int, end: int) -> int:
    while pos < end and data[pos] in _WS:
        pos += 1
    return pos


class _Split:
    """The ``events`` array's elements, one span at a time, and the file round it checked."""

    def __init__(self, data: Any) -> None:
        self.data = data
        match = _ARRAY.search(data)
        if match is None:
            raise refuse("no events array")
        self.array_open = match.end() - 1  # the "["
        self.array_close = -1

    def spans(self) -> Iterator[tuple[int, int, dict[str, Any]]]:
        data, size = self.data, len(self.data)
        view = memoryview(data)
        pos = _skip_ws(data, self.array_open + 1, size)
        if pos < size and data[pos] == 0x5D:  # "]": no events
            self.array_close = pos
            return
        while True:
            if pos >= size or data[pos] != 0x7B:  # "{"
                raise refuse("an element of events is not an object")
            start = pos
            found = self._element(view, start, fast=True) or self._element(view, start, fast=False)
            if found is None:
                raise refuse("the events array is not complete JSON")
            end, event = found
            yield start, end, event
            pos = _skip_ws(data, end, size)
            if pos < size and data[pos] == 0x2C:  # ","
                pos = _skip_ws(data, pos + 1, size)
                continue
            if pos < size and data[pos] == 0x5D:
                self.array_close = pos
                return
            raise refuse("the events array is not complete JSON")

    def _element(self, view: memoryview, start: int, *, fast: bool) -> tuple[int, dict[str, Any]] | None:
        """The element starting at ``start``: (its end, its value). The fast way tries orjson only where the
        braces and brackets since ``start`` balance; braces inside strings can keep them from ever
        balancing, so after ``_FAST_TRIES`` candidates the slow way tries every candidate in turn (the
        first cut orjson reads whole is the element's end: an earlier one is incomplete, a later one has
        trailing bytes)."""
        data, count, loads = self.data, self.data.count, orjson.loads
        opens = closes = 0
        scanned = start
        for tries, cand in enumerate(_CANDIDATE.finditer(data, start)):
            end = cand.start() + 1
            if fast:
                if tries >= _FAST_TRIES:
                    return None
                opens += count(b"{", scanned, end)
                closes += count(b"}", scanned, end)
                scanned = end
                if opens != closes:
                    continue
            try:
                event = loads(view[start:end])
            except orjson.JSONDecodeError:
                continue
            return end, event
        return None

    def check_outside(self) -> None:
        """The file with the array emptied is one JSON object holding it at ``events`` or
        ``history.events``."""
        data = self.data
        skeleton = bytes(data[: self.array_open + 1]) + bytes(data[self.array_close :])
        try:
            top = orjson.loads(skeleton)
        except orjson.JSONDecodeError:
            raise refuse("not a JSON object") from None
        if not isinstance(top, dict):
            raise refuse("not a JSON object")
        if top.get("events") == []:
            return
        history = top.get("history")
        if isinstance(history, dict) and history.get("events") == [] and "events" not in top:
            return
        raise refuse('no "events" array at the top or under "history"')


# -- the mapping ----------------------------------------------------------------------------------------


def _name_of(obj: Any) -> str | None:
    """``{"name": "..."}`` (activityType, workflowType) -> the name."""
    if isinstance(obj, dict):
        name = obj.get("name")
        if isinstance(name, str) and name:
            return name
    return None


def _json_payload_text(payloads: Any) -> Any:
    """The first payload's value when it is ``json/plain`` (a local activity marker's metadata); else None.
    Only the activity type's name is ever read from it, never copied."""
    if isinstance(payloads, dict):
        payloads = payloads.get("payloads")
    if not isinstance(payloads, list) or not payloads or not isinstance(payloads[0], dict):
        return None
    payload = payloads[0]
    metadata = payload.get("metadata")
    encoding = metadata.get("encoding") if isinstance(metadata, dict) else None
    data = payload.get("data")
    if not isinstance(encoding, str) or not isinstance(data, str):
        return None
    try:
        if base64.b64decode(encoding, validate=True).decode() != _JSON_PLAIN:
            return None
        return orjson.loads(base64.b64decode(data, validate=True))
    except (ValueError, orjson.JSONDecodeError):
        return None


def _local_activity_type(attrs: dict[str, Any]) -> str | None:
    """The activity type a local activity marker names, where its details say it in plain JSON: the Java
    SDK's ``type`` entry, or the ``activity_type`` / ``ActivityType`` of the core and Go SDKs' ``data``."""
    details = attrs.get("details")
    if not isinstance(details, dict):
        return None
    value = _json_payload_text(details.get("type"))
    if isinstance(value, str) and value:
        return value
    data = _json_payload_text(details.get("data"))
    if isinstance(data, dict):
        for key in ("activity_type", "ActivityType", "activityType"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def _origin(attrs: dict[str, Any], workflow_type: str) -> dict[str, str]:
    """The execution's own ids as its started event names them: the workflow id (servers that write it
    there), the run id, the task queue. Ids and names only, never a payload."""
    found = {"workflow_type": workflow_type}
    for key, name in (("workflowId", "workflow_id"), ("originalExecutionRunId", "run_id")):
        value = attrs.get(key)
        if isinstance(value, str) and value:
            found[name] = value
    if "run_id" not in found and isinstance(attrs.get("firstExecutionRunId"), str) and attrs["firstExecutionRunId"]:
        found["run_id"] = attrs["firstExecutionRunId"]
    queue = _name_of(attrs.get("taskQueue"))
    if queue is not None:
        found["task_queue"] = queue
    return found


class _Mapper:
    """docs/imports.md's table, one event at a time, into a Journal."""

    def __init__(self, effects: ClassMap, run: str | None, file_sha: str) -> None:
        self.effects = effects
        self.run_arg = run
        self.file_sha = file_sha
        self.journal: Journal | None = None
        self.skipped: dict[str, int] = {}
        self.activities: dict[int, str] = {}  # scheduled event id -> intent
        self.started: set[int] = set()  # scheduled event ids of activities / nexus operations started
        self.children: dict[int, str] = {}
        self.signals: dict[int, str] = {}
        self.cancels: dict[int, str] = {}
        self.nexus: dict[int, str] = {}
        self.at_prefix = "\x00"  # the date, hour and minute of the last time proven RFC 3339

    def _at(self, event: dict[str, Any], eid: int) -> str | None:
        at = event.get("eventTime")
        if at is None:
            return None
        # Consecutive events share their date, hour and minute: once proven, only the rest is checked.
        if type(at) is str and at.startswith(self.at_prefix) and _SECONDS.fullmatch(at, 17):
            return at
        if not valid_at(at):
            raise refuse(f"event {eid}: eventTime is not an RFC 3339 time")
        self.at_prefix = at[:17]
        return at

    def _attrs(self, event: dict[str, Any], name: str, eid: int) -> dict[str, Any]:
        attrs = event.get(_attributes_key(name))
        if not isinstance(attrs, dict):
            raise refuse(f"event {eid}: {name} has no {_attributes_key(name)} object")
        return attrs

    def _readback(self, table: dict[int, str], attrs: dict[str, Any], key: str, eid: int, name: str) -> str:
        ref = attrs.get(key)
        if type(ref) is str and _DECIMAL.fullmatch(ref):
            ref = int(ref)
        intent = table.get(ref) if type(ref) is int else None
        if intent is None:
            raise refuse(f"event {eid}: {name} names no earlier event by {key}")
        return intent

    def _str(self, attrs: dict[str, Any], key: str, eid: int, name: str) -> str:
        value = attrs.get(key)
        if not isinstance(value, str) or not value:
            raise refuse(f"event {eid}: {name} has no {key}")
        return value

    def _dispatch(
        self, j: Journal, at: str | None, eid: int, intent: str, cls: str, key: str | None, extra: dict[str, Any]
    ) -> None:
        fields: dict[str, Any] = {"turn": TURN, "intent": intent, "effect_class": cls, **extra}
        if cls == "idempotent":
            fields["idempotency_key"] = key
        j.add("intent_dispatched", at, eid, fields)

    def _observe(self, j: Journal, at: str | None, eid: int, intent: str, outcome: str) -> None:
        j.add("effect_observed", at, eid, {"turn": TURN, "intent": intent, "outcome": outcome})

    def feed(self, event: dict[str, Any], eid: int) -> None:
        spelled = event.get("eventType")
        if not isinstance(spelled, str) or not spelled:
            raise refuse(f"event {eid}: no eventType")
        name = event_type_name(spelled)
        j = self.journal
        at = self._at(event, eid)  # checked on every event, journaled or not
        if j is None:
            self._start(event, name, eid, at)
            return
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, j, event, name, eid, at)
        elif name in _SKIPPED_EXACT or name.startswith(_SKIPPED_PREFIXES):
            self._skip(name)
        else:
            # Not in the table (a newer server's event, or a second WorkflowExecutionStarted):
            # journaled as a kind the engine does not know, so the run blocks until someone looks.
            j.add("temporal." + spelled, at, eid, {"turn": TURN})

    def _start(self, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        """Event 1 opens the journal: the run is named and the workflow's one turn planned."""
        if name != "WorkflowExecutionStarted":
            raise refuse("event 1 is not WorkflowExecutionStarted")
        attrs = self._attrs(event, name, eid)
        workflow_type = _name_of(attrs.get("workflowType"))
        if workflow_type is None:
            raise refuse("event 1: WorkflowExecutionStarted names no workflowType")
        j = self.journal = Journal(self._run_name(attrs))
        j.origin.update(_origin(attrs, workflow_type))
        j.add("turn_planned", at, eid, {"turn": TURN, "lineage": "temporal:" + workflow_type, "phases": PHASES})
        j.add("phase_committed", at, eid, {"turn": TURN, "phase": "start"})

    def _run_name(self, attrs: dict[str, Any]) -> str:
        """The run given, else the first execution's run id (stable across continue-as-new), else the file's."""
        if self.run_arg:
            return self.run_arg
        for key in ("originalExecutionRunId", "firstExecutionRunId"):
            value = attrs.get(key)
            if isinstance(value, str) and value:
                return "temporal-" + value
        return "temporal-" + self.file_sha[:16]

    def _activity_scheduled(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        attrs = self._attrs(event, name, eid)
        activity_id = self._str(attrs, "activityId", eid, name)
        activity_type = _name_of(attrs.get("activityType"))
        cls, decided = self.effects.classify(activity_type)
        intent = "activity:" + activity_id
        extra: dict[str, Any] = {}
        if activity_type is not None:
            extra["activity_type"] = activity_type
        if "input" in attrs and attrs["input"] is not None:
            extra["args_digest"] = value_digest(attrs["input"])
        self._dispatch(j, at, eid, intent, cls, f"{j.run}/{activity_id}", extra)
        j.decided_by[intent] = decided
        self.activities[eid] = intent

    def _scheduled_closed(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        """An activity's or a Nexus operation's close, by its scheduled event. A cancel is `failed`
        when it never started (it never ran), else `unknown`."""
        attrs = self._attrs(event, name, eid)
        table = self.activities if name.startswith("Activity") else self.nexus
        intent = self._readback(table, attrs, "scheduledEventId", eid, name)
        outcome = _SCHEDULED_CLOSED[name]
        if outcome is None:
            outcome = "unknown" if int(attrs["scheduledEventId"]) in self.started else "failed"
        self._observe(j, at, eid, intent, outcome)

    def _started(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        """Journals nothing, but remembers the start so that a later cancel reads `unknown`."""
        attrs = self._attrs(event, name, eid)
        ref = attrs.get("scheduledEventId")
        if type(ref) is str and _DECIMAL.fullmatch(ref):
            ref = int(ref)
        if type(ref) is int:
            self.started.add(ref)
        self._skip(name)

    def _marker(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        """A local activity's marker is its dispatch and its readback at once; other markers are skipped."""
        attrs = self._attrs(event, name, eid)
        if attrs.get("markerName") not in _LOCAL_MARKERS:
            self._skip(name)
            return
        activity_type = _local_activity_type(attrs)
        cls, decided = self.effects.classify(activity_type)
        intent = f"local:{eid}"
        extra = {"activity_type": activity_type} if activity_type is not None else {}
        self._dispatch(j, at, eid, intent, cls, f"{j.run}/local/{eid}", extra)
        j.decided_by[intent] = decided
        self._observe(j, at, eid, intent, "failed" if attrs.get("failure") else "succeeded")

    def _child_initiated(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        """A child workflow is idempotent by its workflow id: Temporal dedupes starts on it."""
        attrs = self._attrs(event, name, eid)
        workflow_id = self._str(attrs, "workflowId", eid, name)
        intent = "child:" + workflow_id
        extra: dict[str, Any] = {}
        child_type = _name_of(attrs.get("workflowType"))
        if child_type is not None:
            extra["workflow_type"] = child_type
        if attrs.get("input") is not None:
            extra["args_digest"] = value_digest(attrs["input"])
        self._dispatch(j, at, eid, intent, "idempotent", workflow_id, extra)
        self.children[eid] = intent

    def _child_closed(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        attrs = self._attrs(event, name, eid)
        intent = self._readback(self.children, attrs, "initiatedEventId", eid, name)
        self._observe(j, at, eid, intent, _CHILD_CLOSED[name])

    def _signal_initiated(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        self._attrs(event, name, eid)
        intent = f"signal:{eid}"
        self._dispatch(j, at, eid, intent, "idempotent", f"{j.run}/signal/{eid}", {})
        self.signals[eid] = intent

    def _signal_closed(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        attrs = self._attrs(event, name, eid)
        intent = self._readback(self.signals, attrs, "initiatedEventId", eid, name)
        self._observe(j, at, eid, intent, "succeeded" if name == "ExternalWorkflowExecutionSignaled" else "failed")

    def _cancel_initiated(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        self._attrs(event, name, eid)
        intent = f"cancel:{eid}"
        self._dispatch(j, at, eid, intent, "idempotent", f"{j.run}/cancel/{eid}", {})
        self.cancels[eid] = intent

    def _cancel_closed(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        attrs = self._attrs(event, name, eid)
        intent = self._readback(self.cancels, attrs, "initiatedEventId", eid, name)
        ok = name == "ExternalWorkflowExecutionCancelRequested"
        self._observe(j, at, eid, intent, "succeeded" if ok else "failed")

    def _nexus_scheduled(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        attrs = self._attrs(event, name, eid)
        operation = attrs.get("operation") if isinstance(attrs.get("operation"), str) else None
        cls, decided = self.effects.classify(operation or None)
        intent = f"nexus:{eid}"
        extra = {"operation": operation} if operation else {}
        if attrs.get("input") is not None:
            extra["args_digest"] = value_digest(attrs["input"])
        self._dispatch(j, at, eid, intent, cls, f"{j.run}/nexus/{eid}", extra)
        j.decided_by[intent] = decided
        self.nexus[eid] = intent

    def _workflow_closed(self, j: Journal, event: dict[str, Any], name: str, eid: int, at: str | None) -> None:
        j.add("phase_committed", at, eid, {"turn": TURN, "phase": "close"})
        j.add("turn_terminal", at, eid, {"turn": TURN, "status": _WORKFLOW_CLOSED[name]})

    def _skip(self, name: str) -> None:
        self.skipped[name] = self.skipped.get(name, 0) + 1


_Handler = Callable[[_Mapper, Journal, dict[str, Any], str, int, "str | None"], None]

# The event types the table maps to records (and the two started events, which are tracked), each with
# the step that journals it. Any other type is skipped or journaled as unknown.
_HANDLERS: dict[str, _Handler] = {
    "ActivityTaskScheduled": _Mapper._activity_scheduled,
    **dict.fromkeys(_SCHEDULED_CLOSED, _Mapper._scheduled_closed),
    "ActivityTaskStarted": _Mapper._started,
    "NexusOperationStarted": _Mapper._started,
    "MarkerRecorded": _Mapper._marker,
    "StartChildWorkflowExecutionInitiated": _Mapper._child_initiated,
    **dict.fromkeys(_CHILD_CLOSED, _Mapper._child_closed),
    "SignalExternalWorkflowExecutionInitiated": _Mapper._signal_initiated,
    "ExternalWorkflowExecutionSignaled": _Mapper._signal_closed,
    "SignalExternalWorkflowExecutionFailed": _Mapper._signal_closed,
    "RequestCancelExternalWorkflowExecutionInitiated": _Mapper._cancel_initiated,
    "ExternalWorkflowExecutionCancelRequested": _Mapper._cancel_closed,
    "RequestCancelExternalWorkflowExecutionFailed": _Mapper._cancel_closed,
    "NexusOperationScheduled": _Mapper._nexus_scheduled,
    **dict.fromkeys(_WORKFLOW_CLOSED, _Mapper._workflow_closed),
}


def convert(
    data: Any, *, effects: ClassMap, run: str | None, file_sha: str, progress: Progress | None
) -> tuple[Journal, dict[str, int], int]:
    """(the journal, skipped counts, events) of the history in ``data`` (bytes).
    ``progress(done, total)`` counts the file's bytes."""
    split = _Split(data)
    size = len(data)
    mapper = _Mapper(effects, run, file_sha)
    places: list[tuple[int, int, int]] = []  # (eventId, start, end) of every event, for the second pass
    in_order = True
    for start, end, event in split.spans():
        eid = _event_id(event)
        places.append((eid, start, end))
        if in_order:
            if eid == len(places):
                mapper.feed(event, eid)
            else:
                in_order = False  # the first event out of place: the rest is only collected
        if progress is not None and len(places) % 1024 == 0:
            progress(end, size)
    split.check_outside()
    if not in_order:
        mapper = _Mapper(effects, run, file_sha)
        places.sort()
        if [p[0] for p in places] != list(range(1, len(places) + 1)):
            raise refuse("the eventIds, in order, are not exactly 1..n")
        view = memoryview(data)
        for eid, start, end in places:
            mapper.feed(orjson.loads(view[start:end]), eid)
    if mapper.journal is None:
        raise refuse("no events")
    if progress is not None:
        progress(size, size)
    return mapper.journal, mapper.skipped, len(places)


__all__ = ["ImportRefused", "convert", "event_type_name"]
