"""Small journal builders and assertions shared by the engine tests (and reusable by the store, API and
chaos layers: nothing here touches Django or a database).

Journals are written with the engine's own `JournalWriter` (canonical bytes, the v2 chain, forks,
checkpoints); `put()` writes a record with any envelope field overridden or dropped while keeping the chain
intact, so a test breaks exactly the one thing it is about.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from engine import (
    DEFAULT_PHASES,
    RUN_LEVEL,
    SNAPSHOT_REASONS,
    Assessment,
    Code,
    FoldSnapshot,
    SnapshotUnusable,
    TurnDecision,
    assess,
    assess_incremental,
    snapshot_load,
)
from engine.canonical import canonical_bytes, digest
from engine.rewind import REWIND_WINDOW
from engine.warm import forget_warm_folds
from engine.writer import JournalWriter

PHASES: list[str] = list(DEFAULT_PHASES)
REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
if not os.path.exists(PYTHON):  # an install without the project's venv: the interpreter running the tests
    import sys

    PYTHON = sys.executable

_DROP = object()


def writer(run: str = "run-1", *, version: int = 2) -> JournalWriter:
    return JournalWriter(run, version=version)


def contract_digest(obj: Any) -> str:
    """The contract's digest, spelled out independently of the engine (section 1)."""
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(raw).hexdigest()


def put(
    w: JournalWriter, kind: str, *, envelope: Mapping[str, Any] | None = None, drop: Iterable[str] = (), **fields: Any
) -> dict[str, Any]:
    """Append one record on the live branch like `w.append`, but with envelope fields overridden
    (`envelope={"run": "other"}`) or removed (`drop=("at",)`). The chain stays intact: `prev` is the
    digest of the branch's previous record unless the test overrides or drops it."""
    branch = w.branch
    record: dict[str, Any] = {
        "v": w.version,
        "run": w.run,
        "branch": branch,
        "lsn": w.next_lsn[branch],
        "kind": kind,
        "at": w.clock(),
    }
    if w.version >= 2 and w.last_digest[branch] is not None:
        record["prev"] = w.last_digest[branch]
    record.update(fields)
    record.update(envelope or {})
    for name in drop:
        record.pop(name, None)
    w.write_raw(record)
    return record


def on_branch(w: JournalWriter, branch: int, kind: str, **fields: Any) -> dict[str, Any]:
    """Append like a stale writer that still writes on `branch` (its lsn and chain continue there)."""
    live = w.branch
    w.branch = branch
    try:
        return w.append(kind, **fields)
    finally:
        w.branch = live


def full_turn(
    w: JournalWriter,
    turn: str,
    lineage: str = "lineage",
    phases: Sequence[str] | None = None,
    status: str = "completed",
) -> None:
    w.plan(turn, lineage, list(phases) if phases is not None else None)
    for phase in phases or PHASES:
        w.commit(turn, phase)
    w.terminal(turn, status)


def commit_through(w: JournalWriter, turn: str, phase: str, phases: Sequence[str] = DEFAULT_PHASES) -> None:
    """Commit the plan's phases up to and including `phase`."""
    for name in phases:
        w.commit(turn, name)
        if name == phase:
            return
    raise ValueError(f"{phase} is not in the plan")


def run(lines: Sequence[bytes] | JournalWriter, **kwargs: Any) -> Assessment:
    """Assess lines (or a writer's lines)."""
    return assess(list(lines), **kwargs)


def codes(result: Assessment) -> list[str]:
    return [str(v.code) for v in result.violations]


def turn(result: Assessment, name: str) -> TurnDecision:
    for t in result.turns:
        if t.turn == name:
            return t
    raise AssertionError(f"no decision for turn {name!r}: {[t.turn for t in result.turns]}")


def first_run_level(result: Assessment) -> str | None:
    for v in result.violations:
        if v.code in RUN_LEVEL and v.code != Code.OFFSET_MISMATCH:
            return str(v.code)
    for v in result.violations:
        if v.code == Code.OFFSET_MISMATCH:
            return str(v.code)
    return None


def assert_run_blocked(result: Assessment, code: str) -> None:
    """`code` is the run's first run-level violation and every turn is blocked with it (rule 1)."""
    assert first_run_level(result) == code, codes(result)
    assert result.turns, "a run-level test needs at least one turn to block"
    for t in result.turns:
        assert (t.decision.value, t.reason) == ("blocked", code), t


def assert_clean(result: Assessment) -> None:
    assert result.violations == (), [v.to_dict() for v in result.violations]


def to_json(result: Assessment) -> bytes:
    """The bytes `assess_journal --json` prints (minus the newline)."""
    return json.dumps(result.to_dict(), ensure_ascii=False).encode()


def obj(line: bytes) -> dict[str, Any]:
    loaded = orjson.loads(line)
    assert isinstance(loaded, dict)
    return loaded


def line_of(record: Mapping[str, Any]) -> bytes:
    return canonical_bytes(dict(record))


def rechain(lines: Sequence[bytes]) -> list[bytes]:
    """Recompute every v2 `prev` (in file order, per branch, forks included) after a deliberate edit, so
    that a test can change a record's meaning without also breaking the chain."""
    last: dict[int, str] = {}
    out: list[bytes] = []
    for line in lines:
        record = obj(line)
        branch = record["branch"]
        if record.get("v") == 2:
            if branch in last:
                record["prev"] = last[branch]
            else:
                record.pop("prev", None)
        line = canonical_bytes(record)
        last[branch] = digest(record)
        if record.get("kind") == "fork":
            last[record["new_branch"]] = last[branch]
        out.append(line)
    return out


def write_journal(path: Path, lines: Sequence[bytes], *, final_newline: bool = True) -> Path:
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path.write_bytes(data)
    return path


__all__ = [
    "assert_same",
    "fold_in_batches",
    "PHASES",
    "PYTHON",
    "REPO_ROOT",
    "assert_clean",
    "assert_run_blocked",
    "codes",
    "commit_through",
    "contract_digest",
    "first_run_level",
    "full_turn",
    "line_of",
    "obj",
    "on_branch",
    "put",
    "rechain",
    "run",
    "to_json",
    "turn",
    "write_journal",
    "writer",
]


# -- incremental assessment ---------------------------------------------------------------------------------


def assert_same(got: Assessment, lines: Sequence[bytes], **kwargs: Any) -> None:
    """`got` is what the full fold of `lines` gives: the stable JSON byte for byte, and every field besides
    (violations with their lines and details, branches, checkpoints, each turn's phases and reason line)."""
    full = assess(list(lines), **kwargs)
    assert canonical_bytes(got.to_dict()) == canonical_bytes(full.to_dict())
    assert got == full


def fold_in_batches(
    lines: Sequence[bytes],
    cuts: Sequence[int],
    *,
    round_trip: bool,
    cold: bool = False,
    written: list[bytes] | None = None,
    rewind_window: int = REWIND_WINDOW,
    **kwargs: Any,
) -> tuple[list[str], FoldSnapshot]:
    """Fold the journal batch by batch as a caller would (`assess_incremental`, cut before each of `cuts`), each
    snapshot fed to the next batch as it is or read back from its bytes (`round_trip`), checking the result
    after every batch against the full fold of the prefix. `cold`: every batch reads its snapshot's bytes (the
    folds this process keeps in memory are dropped first), as a process that never folded the run would.
    `written` receives each batch's snapshot bytes; `rewind_window` is the engine's. Returns the reasons of the
    refusals met, each followed by the caller's fallback (a fold from the start)."""
    refusals: list[str] = []
    snapshot: FoldSnapshot | None = None
    done = 0
    for end in [*sorted(set(cuts)), len(lines)]:
        batch, prefix = lines[done:end], lines[:end]
        if cold:
            forget_warm_folds()
        try:
            result, after = assess_incremental(snapshot, list(batch), rewind_window=rewind_window, **kwargs)
        except SnapshotUnusable as exc:
            assert exc.reason in SNAPSHOT_REASONS
            refusals.append(exc.reason)
            # The caller's fallback.
            result, after = assess_incremental(None, list(prefix), rewind_window=rewind_window, **kwargs)
        assert_same(result, prefix, **kwargs)
        assert after.lines == end
        assert after.digest == hashlib.sha256(after.data).hexdigest()
        assert after.part_digests == tuple(hashlib.sha256(part).hexdigest() for part in after.parts)
        if written is not None:
            written.append(after.data)
        snapshot = snapshot_load(after.data, after.parts) if round_trip else after
        assert snapshot == after
        done = end
    assert snapshot is not None
    return refusals, snapshot


def assert_changed_only(lines: list[bytes], cuts: list[int], **kwargs: Any) -> int:
    """Batch by batch, ``changed_only=True`` gives the full fold's assessment with only some turns listed,
    each exactly as the full fold decides it; every turn it leaves out is decided as the full fold of the
    lines before the batch decided it. Returns how many batches listed fewer turns than the run has."""
    snapshot: FoldSnapshot | None = None
    done = 0
    fewer = 0
    for end in [*sorted(set(cuts)), len(lines)]:
        try:
            got, after = assess_incremental(snapshot, lines[done:end], changed_only=True, **kwargs)
        except SnapshotUnusable:
            got, after = assess_incremental(None, lines[:end], changed_only=True, **kwargs)
            snapshot = None  # a fold from the start lists every turn
        full = assess(lines[:end], **kwargs)
        listed = {d.turn for d in got.turns}
        assert got.turns == tuple(d for d in full.turns if d.turn in listed)
        assert replace(got, turns=full.turns) == full
        if snapshot is None:
            assert got.turns == full.turns
        else:
            earlier = {d.turn: d for d in assess(lines[:done], **kwargs).turns}
            assert all(d == earlier.get(d.turn) for d in full.turns if d.turn not in listed)
            fewer += len(listed) < len(full.turns)
        snapshot, done = after, end
    return fewer
