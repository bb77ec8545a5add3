"""A LangGraph checkpointer's SQLite database (``langgraph-checkpoint-sqlite``) to turn journals, one per
thread (imports.md, "LangGraph"; docs/imports.md has the mapping).

The database is opened from its bytes in memory (``sqlite3.Connection.deserialize``), read only; nothing
is written anywhere. Both layouts are read: the current one, whose ``writes`` rows carry ``task_path``
(which names the node that wrote), and the older one without it.

A checkpoint's blob is decoded (msgpack or JSON, as its ``type`` says) only to learn its time, which
channels hold a value (their names, never the values), their versions and the versions each node has
seen: from those the nodes due at the latest checkpoint are found. Channel and write values are never
copied; turns carry the checkpoint blob's sha256, readbacks the digest of their writes' digests.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import orjson

from engine.assess import valid_at

from ._common import ClassMap, Journal, Progress, refuse, sqlite_image_open

PHASES = ["tasks", "checkpoint"]
_CHECKPOINT_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint"}
_WRITES_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value"}

ERROR, INTERRUPT, RESUME, SCHEDULED = "__error__", "__interrupt__", "__resume__", "__scheduled__"
PAUSE_CHANNELS = frozenset({INTERRUPT, RESUME, SCHEDULED})
START = "__start__"
TASKS = "__pregel_tasks"  # a Send's pending tasks
BRANCH_TO = "branch:to:"  # StateGraph's trigger channel of a node
PULL_PREFIX = "~__pregel_pull, "


@dataclass
class _Task:
    node: str | None
    channels: list[tuple[int, str, str, str]] = field(default_factory=list)  # (idx, channel, type, digest)

    @property
    def outcome(self) -> str | None:
        """``failed`` for an error, ``succeeded`` for any other result, None for a pause (an interrupt,
        a resume value, a scheduling mark): a pause is not an effect."""
        names = {c[1] for c in self.channels}
        if ERROR in names:
            return "failed"
        if names - PAUSE_CHANNELS:
            return "succeeded"
        return None

    def digest(self) -> str:
        return hashlib.sha256(orjson.dumps([list(c) for c in self.channels])).hexdigest()


@dataclass
class _Checkpoint:
    cid: str
    parent: str | None
    at: str | None
    blob_digest: str
    readable: bool
    due: list[str]  # nodes due to run from it (StateGraph's branch:to:<node> channels, and __start__)
    sends: bool  # Send tasks pending
    step: int | None
    source: str | None


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _decode(kind: Any, blob: Any) -> dict[str, Any] | None:
    """The checkpoint's fields, or None when its serialisation is not one this reads (pickle, encrypted)."""
    if not isinstance(blob, bytes):
        return None
    try:
        if kind == "msgpack":
            import ormsgpack

            value = ormsgpack.unpackb(blob, ext_hook=lambda _code, _data: None, option=ormsgpack.OPT_NON_STR_KEYS)
        elif kind == "json":
            value = json.loads(blob)
        else:
            return None
    except (ValueError, TypeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _newer(version: Any, seen: Any) -> bool:
    """A channel's version is newer than what the node saw; versions of different kinds (or unreadable)
    count as newer, so that a node is never left out by a comparison that cannot be made."""
    if seen is None:
        return True
    if type(version) is type(seen) and isinstance(version, (int, float, str)):
        return bool(version > seen)
    return True


def _due(cp: dict[str, Any]) -> tuple[list[str], bool]:
    values = cp.get("channel_values")
    versions = cp.get("channel_versions")
    seen = cp.get("versions_seen")
    if not isinstance(values, dict):
        return [], False
    versions = versions if isinstance(versions, dict) else {}
    seen = seen if isinstance(seen, dict) else {}
    due: list[str] = []
    for channel in values:
        if not isinstance(channel, str):
            continue
        if channel == START:
            node = START
        elif channel.startswith(BRANCH_TO) and len(channel) > len(BRANCH_TO):
            node = channel[len(BRANCH_TO) :]
        else:
            continue
        node_seen = seen.get(node)
        last = node_seen.get(channel) if isinstance(node_seen, dict) else None
        if _newer(versions.get(channel), last):
            due.append(node)
    return sorted(set(due)), TASKS in values and bool(values.get(TASKS, True))


def _checkpoint(row: tuple[Any, ...]) -> _Checkpoint:
    cid, parent, kind, blob, metadata = row
    cid = str(cid)
    raw = blob if isinstance(blob, bytes) else (blob.encode() if isinstance(blob, str) else b"")
    cp = _decode(kind, blob)
    at = cp.get("ts") if cp is not None else None
    if not valid_at(at):
        at = None
    due, sends = _due(cp) if cp is not None else ([], False)
    step = source = None
    if isinstance(metadata, (bytes, str)):
        try:
            meta = json.loads(metadata)
        except ValueError:
            meta = None
        if isinstance(meta, dict):
            step = meta.get("step") if type(meta.get("step")) is int else None
            source = meta.get("source") if isinstance(meta.get("source"), str) else None
    return _Checkpoint(
        cid=cid,
        parent=str(parent) if parent is not None else None,
        at=at,
        blob_digest=hashlib.sha256(raw).hexdigest(),
        readable=cp is not None,
        due=due,
        sends=sends,
        step=step,
        source=source,
    )


def _node_of(task_path: Any) -> str | None:
    if isinstance(task_path, str) and task_path.startswith(PULL_PREFIX):
        node = task_path[len(PULL_PREFIX) :]
        if node and ", " not in node:
            return node
    return None


class _Run:
    """One thread's journal."""

    def __init__(self, run: str, lineage: str, effects: ClassMap, writes: dict[str, dict[str, _Task]]) -> None:
        self.j = Journal(run)
        self.lineage = lineage
        self.effects = effects
        self.writes = writes  # checkpoint id -> task id -> task
        self.journaled: set[str] = set()  # checkpoints whose writes are journaled
        self.position: dict[str, tuple[int, int]] = {}  # checkpoint -> (branch, lsn) right after its turn
        self.parent_branch: dict[int, tuple[int, int]] = {}  # branch -> (parent branch, from_lsn)
        self.checkpoints: dict[str, _Checkpoint] = {}
        self.tip: str | None = None
        self.skipped: dict[str, int] = {}

    def _plan(self, turn: str, cp: _Checkpoint) -> None:
        fields: dict[str, Any] = {
            "turn": turn,
            "lineage": self.lineage,
            "phases": PHASES,
            "checkpoint_digest": cp.blob_digest,
        }
        if cp.step is not None:
            fields["step"] = cp.step
        if cp.source is not None:
            fields["checkpoint_source"] = cp.source
        self.j.add("turn_planned", cp.at, cp.cid, fields)
        if not cp.readable:
            # Its channels cannot be read, so what was due from it is not known: the run blocks.
            self.j.add("langgraph.checkpoint_unreadable", cp.at, cp.cid, {"turn": turn})

    def _tasks(self, turn: str, of: str, at: str | None) -> dict[str | None, list[str | None]]:
        """Journal the tasks that wrote against checkpoint ``of`` (once); returns node -> outcomes."""
        found: dict[str | None, list[str | None]] = {}
        tasks = self.writes.get(of, {})
        if of in self.journaled:
            for task in tasks.values():
                found.setdefault(task.node, []).append(task.outcome)
            return found
        self.journaled.add(of)
        for task_id in sorted(tasks):
            task = tasks[task_id]
            outcome = task.outcome
            found.setdefault(task.node, []).append(outcome)
            if outcome is None:
                self.skipped["pause"] = self.skipped.get("pause", 0) + 1
                continue
            intent = "task:" + task_id
            cls, decided = self.effects.classify(task.node)
            fields: dict[str, Any] = {"turn": turn, "intent": intent, "effect_class": cls}
            if cls == "idempotent":
                fields["idempotency_key"] = f"{self.j.run}/{task_id}"
            if task.node is not None:
                fields["node"] = task.node
            source = f"{of}/{task_id}"
            self.j.add("intent_dispatched", at, source, fields)
            self.j.decided_by[intent] = decided
            self.j.add(
                "effect_observed",
                at,
                source,
                {"turn": turn, "intent": intent, "outcome": outcome, "writes_digest": task.digest()},
            )
        return found

    def _inherited_end(self, branch: int) -> tuple[int, int] | None:
        while branch in self.parent_branch:
            parent, from_lsn = self.parent_branch[branch]
            if from_lsn >= 0:
                return parent, from_lsn
            branch = parent
        return None

    def add(self, cp: _Checkpoint) -> None:
        j = self.j
        parent = cp.parent
        known = parent is not None and parent in self.checkpoints
        if (self.tip is not None and parent is None) or (parent is not None and not known):
            # Its parent is no earlier checkpoint of the thread (missing, or after it in id order): where
            # it belongs is not known, so the run blocks until someone looks. It continues the live line.
            j.add("langgraph.parent_unknown", cp.at, cp.cid, {})
        elif known and parent != self.tip:
            self.pending()  # the line left behind keeps what was pending at its tip, as evidence
            where = self.position[parent]  # type: ignore[index]
            exact = where[0] == j.branch
            from_lsn = where[1] if exact else -1
            if not exact and self._inherited_end(j.branch) == where:
                exact = True
            old_branch = j.branch
            j.fork(from_lsn, f"langgraph: checkpoint {cp.cid} continues from {parent}", cp.at, cp.cid)
            self.parent_branch[j.branch] = (old_branch, from_lsn)
            if not exact:
                # The contract rewinds only within the live branch: this fork keeps more than the
                # checkpoint's own line, so the run blocks until someone looks.
                j.add("langgraph.rewind_inexact", cp.at, cp.cid, {})
        self.checkpoints[cp.cid] = cp
        turn = "checkpoint:" + cp.cid
        self._plan(turn, cp)
        if known:
            self._tasks(turn, parent, cp.at)  # type: ignore[arg-type]
        j.add("phase_committed", cp.at, cp.cid, {"turn": turn, "phase": "tasks"})
        j.add("phase_committed", cp.at, cp.cid, {"turn": turn, "phase": "checkpoint"})
        lsn = j.add("turn_terminal", cp.at, cp.cid, {"turn": turn, "status": "completed"})
        self.position[cp.cid] = (j.branch, lsn)
        self.tip = cp.cid

    def pending(self) -> None:
        """The step due from the tip: its tasks that wrote, and its due nodes that did not (dispatched,
        never read back: LangGraph journals results, never dispatches)."""
        tip = self.tip
        if tip is None or tip in self.journaled:
            return
        cp = self.checkpoints[tip]
        if not cp.due and not cp.sends and not self.writes.get(tip):
            self.journaled.add(tip)
            return
        j = self.j
        turn = "pending:" + tip
        fields: dict[str, Any] = {"turn": turn, "lineage": self.lineage, "phases": PHASES}
        j.add("turn_planned", cp.at, tip, fields)
        found = self._tasks(turn, tip, cp.at)
        all_written = bool(cp.due) and not cp.sends
        for node in cp.due:
            outcomes = found.get(node)
            if outcomes:
                all_written = all_written and all(o == "succeeded" for o in outcomes)
                continue
            all_written = False
            intent = "node:" + node
            cls, decided = self.effects.classify(node)
            fields = {"turn": turn, "intent": intent, "effect_class": cls, "node": node}
            if cls == "idempotent":
                fields["idempotency_key"] = f"{j.run}/{tip}/{node}"
            j.add("intent_dispatched", cp.at, tip, fields)
            j.decided_by[intent] = decided
        if cp.sends:
            # Send tasks are due, their nodes inside values this never reads: unsafe whatever the map says.
            j.add("intent_dispatched", cp.at, tip, {"turn": turn, "intent": "sends", "effect_class": "unsafe"})
        if found.get(None) and cp.due:
            all_written = False  # writes whose node is not recorded (the older layout) prove no due node
        if all_written:
            j.add("phase_committed", cp.at, tip, {"turn": turn, "phase": "tasks"})


def _iter_writes(conn: sqlite3.Connection, has_path: bool, thread: Any, ns: Any) -> Iterator[tuple[Any, ...]]:
    path = "task_path" if has_path else "''"
    return conn.execute(
        f"SELECT checkpoint_id, task_id, {path}, idx, channel, type, value FROM writes "
        "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id, task_id, idx",
        (thread, ns),
    )


def convert(
    data: bytes, *, effects: ClassMap, prefix: str | None, progress: Progress | None
) -> tuple[list[Journal], dict[str, int], int]:
    with closing(sqlite_image_open(data)) as conn:
        checkpoint_columns = _columns(conn, "checkpoints")
        writes_columns = _columns(conn, "writes")
        if not checkpoint_columns >= _CHECKPOINT_COLUMNS or not writes_columns >= _WRITES_COLUMNS:
            raise refuse("no checkpoints and writes tables of langgraph-checkpoint-sqlite's layout")
        has_path = "task_path" in writes_columns
        has_metadata = "metadata" in checkpoint_columns
        threads = conn.execute(
            "SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints ORDER BY thread_id, checkpoint_ns"
        ).fetchall()
        total = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        events = total + conn.execute("SELECT count(*) FROM writes").fetchone()[0]
        journals: list[Journal] = []
        skipped: dict[str, int] = {}
        done = 0
        names: set[str] = set()
        for thread, ns in threads:
            thread_s, ns_s = str(thread), str(ns or "")
            run = f"{prefix or 'langgraph'}-{thread_s}" + (f"-{ns_s}" if ns_s else "")
            if run in names:
                raise refuse(f"two threads make the same run name {run!r}")
            names.add(run)
            lineage = f"langgraph:{thread_s}" + (f"/{ns_s}" if ns_s else "")
            writes: dict[str, dict[str, _Task]] = {}
            for cid, task_id, task_path, idx, channel, kind, value in _iter_writes(conn, has_path, thread, ns):
                task = writes.setdefault(str(cid), {}).setdefault(str(task_id), _Task(_node_of(task_path)))
                raw = value if isinstance(value, bytes) else (b"" if value is None else str(value).encode())
                task.channels.append((int(idx), str(channel), str(kind), hashlib.sha256(raw).hexdigest()))
                if str(channel) in PAUSE_CHANNELS:
                    skipped[str(channel)] = skipped.get(str(channel), 0) + 1
            state = _Run(run, lineage, effects, writes)
            state.j.origin["thread_id"] = thread_s
            if ns_s:
                state.j.origin["checkpoint_ns"] = ns_s
            meta = "metadata" if has_metadata else "NULL"
            for row in conn.execute(
                f"SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint, {meta} FROM checkpoints "
                "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id",
                (thread, ns),
            ):
                state.add(_checkpoint(row))
                done += 1
                if progress is not None and done % 256 == 0:
                    progress(done, total)
            state.pending()
            for key, n in state.skipped.items():
                skipped[key] = skipped.get(key, 0) + n
            journals.append(state.j)
    if not journals:
        raise refuse("the database holds no checkpoints")
    if progress is not None:
        progress(total, total)
    return journals, skipped, events


__all__ = ["convert"]
