"""A DBOS Transact system database to turn journals, one run per workflow (imports.md; docs/imports.md has
the table).

Two tables are read, ``workflow_status`` and ``operation_outputs``: from a SQLite file's bytes (opened in
memory, read only), or from a PostgreSQL URL with psycopg (one read-only transaction). Only names, ids,
statuses and times are read; outputs, errors and inputs are only tested for being set, never copied.

DBOS writes an operation's row once the operation has finished, so a step that a crash cut off leaves no
row: a pending workflow's next operation is journaled as a dispatch with no readback, with the most
dangerous class the effect map allows.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._common import EFFECT_CLASSES, ClassMap, Journal, Progress, refuse, sqlite_image_open

PHASES = ["start", "close"]
TURN = "workflow"

_ENDED = {"SUCCESS": ("completed", "succeeded"), "ERROR": ("failed", "failed"), "CANCELLED": ("cancelled", "failed")}
_PENDING = frozenset({"PENDING", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})
_NOT_STARTED = frozenset({"ENQUEUED", "DELAYED"})
_GET_RESULT = "DBOS.getResult"


@dataclass(frozen=True)
class Workflow:
    uuid: str
    name: str
    status: str
    created_at: int | None
    updated_at: int | None
    recovery_attempts: int | None


@dataclass(frozen=True)
class Operation:
    workflow: str
    function_id: int
    function_name: str
    has_output: bool
    has_error: bool
    child: str | None
    started_at: int | None
    completed_at: int | None


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise refuse("a number column holds a boolean")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise refuse("a number column holds something else") from None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise refuse(f"a row has no {what}")
    return value


_WORKFLOW_SQL = (
    "SELECT workflow_uuid, name, status, created_at, updated_at, recovery_attempts FROM {schema}workflow_status"
)
_OPERATION_SQL = (
    "SELECT workflow_uuid, function_id, function_name, output IS NOT NULL, error IS NOT NULL,"
    " child_workflow_id, {started}, {completed} FROM {schema}operation_outputs"
)


def _rows(
    workflow_rows: Iterable[Sequence[Any]], operation_rows: Iterable[Sequence[Any]]
) -> tuple[list[Workflow], list[Operation]]:
    workflows = [
        Workflow(
            uuid=_text(r[0], "workflow_uuid"),
            name=_text(r[1], "workflow name"),
            status=_text(r[2], "status"),
            created_at=_int(r[3]),
            updated_at=_int(r[4]),
            recovery_attempts=_int(r[5]),
        )
        for r in workflow_rows
    ]
    operations = []
    for r in operation_rows:
        fid = _int(r[1])
        if fid is None:
            raise refuse("an operation has no function_id")
        child = r[5] if isinstance(r[5], str) and r[5] else None
        operations.append(
            Operation(
                workflow=_text(r[0], "workflow_uuid"),
                function_id=fid,
                function_name=r[2] if isinstance(r[2], str) else "",
                has_output=bool(r[3]),
                has_error=bool(r[4]),
                child=child,
                started_at=_int(r[6]),
                completed_at=_int(r[7]),
            )
        )
    return workflows, operations


def read_sqlite(data: bytes) -> tuple[list[Workflow], list[Operation]]:
    """The two tables of a DBOS SQLite system database, from its bytes."""
    conn = sqlite_image_open(data)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"workflow_status", "operation_outputs"} <= tables:
            raise refuse("not a DBOS system database (no workflow_status and operation_outputs tables)")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(operation_outputs)")}
        started = "started_at_epoch_ms" if "started_at_epoch_ms" in columns else "NULL"
        completed = "completed_at_epoch_ms" if "completed_at_epoch_ms" in columns else "NULL"
        try:
            workflows = conn.execute(_WORKFLOW_SQL.format(schema="")).fetchall()
            operations = conn.execute(_OPERATION_SQL.format(schema="", started=started, completed=completed)).fetchall()
        except sqlite3.DatabaseError:
            raise refuse("the DBOS tables cannot be read") from None
        return _rows(workflows, operations)
    finally:
        conn.close()


def read_postgres(url: str) -> tuple[list[Workflow], list[Operation]]:
    """The two tables of a DBOS PostgreSQL system database (schema ``dbos``), in one read-only transaction.
    OSError when the database cannot be reached."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.read_only = True
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT table_schema FROM information_schema.tables"
                    " WHERE table_name = 'operation_outputs' ORDER BY table_schema = 'dbos' DESC, table_schema"
                )
                found = cur.fetchone()
                if found is None:
                    raise refuse("not a DBOS system database (no operation_outputs table)")
                schema = '"' + str(found[0]).replace('"', '""') + '".'
                cur.execute(_WORKFLOW_SQL.format(schema=schema))
                workflows = cur.fetchall()
                cur.execute(
                    _OPERATION_SQL.format(
                        schema=schema, started="started_at_epoch_ms", completed="completed_at_epoch_ms"
                    )
                )
                operations = cur.fetchall()
    except psycopg.Error as exc:
        raise OSError(f"cannot read the DBOS database: {type(exc).__name__}") from None
    return _rows(workflows, operations)


def rows_digest(workflows: list[Workflow], operations: list[Operation]) -> str:
    """sha256 of what was read (a URL has no file whose bytes to digest)."""
    h = hashlib.sha256()
    for w in workflows:
        h.update(repr(w).encode())
    for o in operations:
        h.update(repr(o).encode())
    return h.hexdigest()


def _at(millis: int | None) -> str | None:
    if millis is None:
        return None
    try:
        stamp = datetime.fromtimestamp(millis // 1000, UTC)
    except (OverflowError, OSError, ValueError):
        raise refuse("a time is out of range") from None
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis % 1000:03d}Z"


def _unknown_class(effects: ClassMap) -> str:
    """The most dangerous class the map allows: what a step that no row names may have been."""
    classes = {*effects.entries.values(), effects.default}
    for cls in reversed(EFFECT_CLASSES):  # unsafe, idempotent, safe
        if cls in classes:
            return cls
    return "unsafe"  # pragma: no cover - the default is always one of the three


def _workflow_journal(
    workflow: Workflow,
    operations: list[Operation],
    by_uuid: dict[str, Workflow],
    effects: ClassMap,
    run: str,
    skipped: dict[str, int],
) -> Journal:
    j = Journal(run)
    src = workflow.uuid
    j.origin.update({"workflow_uuid": workflow.uuid, "workflow_name": workflow.name})
    planned: dict[str, Any] = {"turn": TURN, "lineage": "dbos:" + workflow.name, "phases": PHASES}
    if workflow.recovery_attempts is not None:
        planned["recovery_attempts"] = workflow.recovery_attempts
    j.add("turn_planned", _at(workflow.created_at), src, planned)
    if workflow.status in _NOT_STARTED:
        for op in operations:  # a workflow still waiting to start has run nothing
            raise refuse(f"a workflow not started has operation {op.function_id}")
        return j
    j.add("phase_committed", _at(workflow.created_at), src, {"turn": TURN, "phase": "start"})
    last = 0
    for op in operations:
        last = max(last, op.function_id)
        op_src = f"{src}/{op.function_id}"
        if op.function_name == _GET_RESULT or op.function_name.startswith("DBOS."):
            skipped[op.function_name] = skipped.get(op.function_name, 0) + 1
            continue
        if op.child is not None:
            intent = f"child:{op.child}"
            j.add(
                "intent_dispatched",
                _at(op.started_at),
                op_src,
                {
                    "turn": TURN,
                    "intent": intent,
                    "effect_class": "idempotent",
                    "idempotency_key": op.child,
                    "workflow_name": op.function_name,
                },
            )
            child = by_uuid.get(op.child)
            ended = _ENDED.get(child.status) if child is not None else None
            if child is not None and ended is not None:
                j.add(
                    "effect_observed",
                    _at(child.updated_at),
                    op_src,
                    {"turn": TURN, "intent": intent, "outcome": ended[1]},
                )
            continue
        intent = f"step:{op.function_id}"
        cls, decided = effects.classify(op.function_name or None)
        fields: dict[str, Any] = {"turn": TURN, "intent": intent, "effect_class": cls, "step": op.function_name}
        if cls == "idempotent":
            fields["idempotency_key"] = f"{run}/step/{op.function_id}"
        j.add("intent_dispatched", _at(op.started_at), op_src, fields)
        j.decided_by[intent] = decided
        outcome = "failed" if op.has_error else "succeeded"
        j.add("effect_observed", _at(op.completed_at), op_src, {"turn": TURN, "intent": intent, "outcome": outcome})
    end_at = _at(workflow.updated_at)
    if workflow.status in _PENDING or workflow.status == "CANCELLED":
        # The operation after the last row: a step under way when the process died (or when a cancellation
        # stopped the workflow), or nothing yet. Nothing names it.
        fid = last + 1
        cls = _unknown_class(effects)
        fields = {"turn": TURN, "intent": f"step:{fid}", "effect_class": cls}
        if cls == "idempotent":
            fields["idempotency_key"] = f"{run}/step/{fid}"
        j.add("intent_dispatched", end_at, f"{src}/{fid}", fields)
        if workflow.status == "CANCELLED":
            j.add(
                "effect_observed", end_at, f"{src}/{fid}", {"turn": TURN, "intent": f"step:{fid}", "outcome": "unknown"}
            )
            j.add("turn_terminal", end_at, src, {"turn": TURN, "status": "cancelled"})
    elif workflow.status in _ENDED:
        j.add("phase_committed", end_at, src, {"turn": TURN, "phase": "close"})
        j.add("turn_terminal", end_at, src, {"turn": TURN, "status": _ENDED[workflow.status][0]})
    else:
        j.add("dbos." + workflow.status, end_at, src, {})  # a status this table does not know: blocks
    return j


def convert_rows(
    workflows: list[Workflow],
    operations: list[Operation],
    *,
    effects: ClassMap,
    prefix: str | None,
    progress: Progress | None,
) -> tuple[list[Journal], dict[str, int], int]:
    workflows = sorted(workflows, key=lambda w: w.uuid)
    operations = sorted(operations, key=lambda o: (o.workflow, o.function_id))
    by_workflow: dict[str, list[Operation]] = {w.uuid: [] for w in workflows}
    if len(by_workflow) != len(workflows):
        raise refuse("a workflow appears twice")
    for op in operations:
        if op.workflow not in by_workflow:
            raise refuse("an operation belongs to no workflow")
        by_workflow[op.workflow].append(op)
    by_uuid = {w.uuid: w for w in workflows}
    skipped: dict[str, int] = {}
    journals = []
    total = len(workflows)
    for n, workflow in enumerate(workflows, 1):
        run = f"{prefix or 'dbos'}-{workflow.uuid}"
        journals.append(_workflow_journal(workflow, by_workflow[workflow.uuid], by_uuid, effects, run, skipped))
        if progress is not None and n % 256 == 0:
            progress(n, total)
    if progress is not None:
        progress(total, total)
    return journals, skipped, len(workflows) + len(operations)


def convert(
    data: bytes, *, effects: ClassMap, prefix: str | None, progress: Progress | None
) -> tuple[list[Journal], dict[str, int], int]:
    workflows, operations = read_sqlite(data)
    return convert_rows(workflows, operations, effects=effects, prefix=prefix, progress=progress)


__all__ = ["Operation", "Workflow", "convert", "convert_rows", "read_postgres", "read_sqlite", "rows_digest"]
