"""Incremental assessment: a journal's fold saved after its last line, and resumed for the lines after it.

Journals grow by small batches. ``assess_incremental(snapshot, new_lines)`` folds only the new lines,
starting from the fold a ``FoldSnapshot`` saved, and gives exactly what ``assess`` gives for the whole
prefix (the tests compare the canonical bytes after every batch). What it cannot continue it refuses
with ``SnapshotUnusable``; the caller then folds from the start, which is always correct.

A snapshot is plain bytes, read back without executing anything (JSON, never pickle): a small manifest
and its parts (engine/parts.py)::

    manifest:  {"engine":..., "evidence":<sha256>, "format":2, "kind":"loopx-fold", "lines":N,
                "parts":[[<sha256>, "orjson"|"json"], ...], "projection":...}   (one line, canonical)
               sha256 hex of that line, newline included (the seal)
    parts:     the head (the run's rows), then the turns' rows a thousand turns each

The manifest names every part by its sha256, so its seal covers them all; a fold writes again only the
parts whose turns changed since its last snapshot, and a store keeps the others as they are.
The same lines fed in the same batches give the same bytes. Operator evidence changes the fold itself (an
unsafe retry is judged when it is read), so the evidence is part of a snapshot's identity.

Three speed paths, each exact: the process keeps the fold that wrote a snapshot and folds the next batch
into it instead of reading the bytes back (engine/warm.py); that fold keeps an undo log of the live branch's
last records, so that a fork or checkpoint reaching a little before the batch goes on (engine/rewind.py);
and ``changed_only=True`` decides only the turns the new lines name, unless the run's reason or the live
timeline moved.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .assess import (
    ENGINE_VERSION,
    PROJECTION_VERSION,
    Assessor,
    EvidenceMap,
    Source,
    cycle_collection_paused,
    fold_lines,
    named_turns,
    normalise_evidence,
)
from .canonical import canonical_bytes, is_int
from .parts import CODECS, note_named, open_parts, seal_parts
from .rewind import REWIND_WINDOW, UndoLog
from .types import SNAPSHOT_REASONS, Assessment, SnapshotUnusable
from .warm import warm_fold

FORMAT = 2
_KIND = "loopx-fold"

__all__ = [
    "FORMAT",
    "SNAPSHOT_REASONS",
    "FoldSnapshot",
    "KeptFold",
    "REWIND_WINDOW",
    "SnapshotUnusable",
    "assess_incremental",
    "assess_kept",
    "evidence_digest",
    "snapshot_load",
]


@dataclass(frozen=True)
class FoldSnapshot:
    """The whole fold after a journal's first ``lines`` lines, as deterministic bytes: a manifest and the
    parts it names (see the module's docstring)."""

    data: bytes  # the manifest: its line and its seal
    digest: str  # sha256 hex of data
    lines: int  # how many journal lines it has folded (the journal's line count so far)
    parts: tuple[bytes, ...] = ()  # in the manifest's order, the head first
    part_digests: tuple[str, ...] = ()  # sha256 hex of each part, as the manifest names them


def evidence_digest(normalised: Mapping[Any, Any]) -> str:
    """sha256 of operator evidence (as ``normalise_evidence`` gives it), whatever the order it was given in."""
    items = sorted(
        canonical_bytes(
            [
                list(key) if isinstance(key, tuple) else key,
                value if isinstance(value, str) else sorted([index, found] for index, found in value.items()),
            ]
        )
        for key, value in normalised.items()
    )
    return hashlib.sha256(b"[" + b",".join(items) + b"]").hexdigest()


def _seal(assessor: Assessor, evidence: str) -> FoldSnapshot:
    parts = seal_parts(assessor)
    header = {
        "engine": ENGINE_VERSION,
        "evidence": evidence,
        "format": FORMAT,
        "kind": _KIND,
        "lines": assessor.line_no,
        "parts": [[part.digest, part.codec] for part in parts],
        "projection": PROJECTION_VERSION,
    }
    head = canonical_bytes(header) + b"\n"
    data = head + hashlib.sha256(head).hexdigest().encode("ascii")
    return FoldSnapshot(
        data,
        hashlib.sha256(data).hexdigest(),
        assessor.line_no,
        tuple(part.data for part in parts),
        tuple(part.digest for part in parts),
    )


def _opened(data: bytes) -> dict[str, Any]:
    """The manifest's header, once the seal holds (first, so that any changed byte is "corrupt") and the
    versions are this engine's ("version")."""
    head, newline, seal = data.rpartition(b"\n")
    if not newline or b"\n" in head or hashlib.sha256(head + b"\n").hexdigest().encode("ascii") != seal:
        raise SnapshotUnusable("corrupt", "the bytes are not the ones sealed")
    return _header(head)


def _header(header_line: bytes) -> dict[str, Any]:
    """The header, once its versions are this engine's ("version")."""
    try:
        header = json.loads(header_line)
    except ValueError as exc:
        raise SnapshotUnusable("corrupt", "the header is not JSON") from exc
    if not isinstance(header, dict) or header.get("kind") != _KIND:
        raise SnapshotUnusable("corrupt", "not a fold snapshot")
    versions = (header.get("format"), header.get("engine"), header.get("projection"))
    if versions != (FORMAT, ENGINE_VERSION, PROJECTION_VERSION):
        raise SnapshotUnusable("version", f"format, engine and projection {versions}")
    lines = header.get("lines")
    if not (is_int(lines) and lines >= 0 and isinstance(header.get("evidence"), str)):
        raise SnapshotUnusable("corrupt", "the header has no line count or evidence")
    listed = header.get("parts")
    if not (isinstance(listed, list) and listed and all(_part_named(item) for item in listed)):
        raise SnapshotUnusable("corrupt", "the header names no parts")
    return header


def _part_named(item: Any) -> bool:
    return isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and item[1] in CODECS


def _parts_hold(header: dict[str, Any], parts: Sequence[bytes]) -> tuple[str, ...]:
    """The parts' digests, once each part is the one the manifest names ("corrupt": missing, extra, other)."""
    listed = header["parts"]
    if len(parts) != len(listed):
        raise SnapshotUnusable("corrupt", f"{len(parts)} parts where the manifest names {len(listed)}")
    for number, (part, (digest, _)) in enumerate(zip(parts, listed, strict=True)):
        if hashlib.sha256(part).hexdigest() != digest:
            raise SnapshotUnusable("corrupt", f"part {number} is not the one sealed")
    return tuple(digest for digest, _ in listed)


def snapshot_load(data: bytes, parts: Sequence[bytes]) -> FoldSnapshot:
    """A snapshot read back (from a database, say): its manifest's seal and versions checked, each part
    checked against the digest the manifest names, its digest computed. Raises SnapshotUnusable
    ("corrupt" or "version")."""
    data = bytes(data)
    header = _opened(data)
    held = tuple(bytes(part) for part in parts)
    digests = _parts_hold(header, held)
    return FoldSnapshot(data, hashlib.sha256(data).hexdigest(), header["lines"], held, digests)


def _resumed(snapshot: FoldSnapshot, evidence: dict[Any, Any], evidence_id: str) -> Assessor:
    header = _opened(snapshot.data)
    if hashlib.sha256(snapshot.data).hexdigest() != snapshot.digest or header["lines"] != snapshot.lines:
        raise SnapshotUnusable("corrupt", "the digest or line count does not match the bytes")
    digests = _parts_hold(header, snapshot.parts)
    if header["evidence"] != evidence_id:
        raise SnapshotUnusable("evidence", "folded under other operator evidence")
    codecs = [codec for _, codec in header["parts"]]
    try:
        assessor = open_parts(list(zip(digests, codecs, snapshot.parts, strict=True)), evidence)
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # sealed, yet not rows of this format
        raise SnapshotUnusable("corrupt", "the rows cannot be read") from exc
    if assessor.line_no != snapshot.lines:
        raise SnapshotUnusable("corrupt", "the rows and the header disagree on the line count")
    return assessor


def assess_incremental(
    snapshot: FoldSnapshot | None,
    new_lines: Source,
    *,
    evidence: EvidenceMap | None = None,
    expect: Mapping[int, int] | None = None,
    changed_only: bool = False,
    rewind_window: int = REWIND_WINDOW,
) -> tuple[Assessment, FoldSnapshot]:
    """``snapshot`` None: ``new_lines`` is the whole journal (a full fold). Otherwise ``new_lines`` are the
    lines after the snapshot's last line. Returns the assessment of the whole prefix (identical to
    ``assess(all lines)``) and the snapshot after its last line. Raises SnapshotUnusable (then fold from
    the start: ``assess_incremental(None, all lines)``) and JournalUnreadable.

    ``changed_only``: the assessment's ``turns`` hold only the decisions that may differ from those of the
    snapshot's lines under the same ``expect``: the turns the new lines name and, when a fork moved the live
    timeline, the turns it left behind; every turn when the run's reason moved, when the undo log does not
    hold what a fork left behind, and without a snapshot. The rest of the assessment is whole. A caller
    that keeps the decisions it had replaces those listed.

    ``rewind_window``: how many records of the live branch the fold can undo, so that a later batch's fork
    or checkpoint whose point lies that close before the fold's head goes on without a fold from the start
    (engine/rewind.py; 0: none). It holds about one turn state per record, and changes no result."""
    result, _, after, _ = _assess_from(
        snapshot, new_lines, evidence, expect, changed_only, keep=None, seal=True, window=rewind_window
    )
    if after is None:
        raise RuntimeError("a sealed fold has a snapshot")
    return result, after


@dataclass(frozen=True)
class KeptFold:
    """A fold this process keeps in memory under its caller's ``key`` (no bytes written), after ``lines``
    journal lines. The key names the prefix it folded (say, the run, its line count and the last record's
    chain digest), so that the next batch of the same run can fold into it."""

    key: str
    lines: int


class Kept(NamedTuple):
    """What ``assess_kept`` gives: the assessment, the fold now kept, the snapshot (when sealed), and the
    turns whose decisions may have changed since the start (None: every turn's may)."""

    result: Assessment
    kept: KeptFold
    snapshot: FoldSnapshot | None
    changed: frozenset[str] | None


def assess_kept(
    start: FoldSnapshot | KeptFold | None,
    new_lines: Source,
    *,
    keep: str,
    seal: bool,
    evidence: EvidenceMap | None = None,
    expect: Mapping[int, int] | None = None,
    changed_only: bool = False,
    rewind_window: int = REWIND_WINDOW,
) -> Kept | None:
    """``assess_incremental`` for a caller that writes its snapshot only now and then. ``start``: None (a
    full fold), a stored snapshot, or a fold kept under a key; None is returned, and nothing read, when no
    fold is kept under that key with that evidence and line count (then start from a stored snapshot).
    The fold after the new lines is kept under ``keep``; its snapshot is sealed only when ``seal``. The
    assessment is exactly ``assess(all lines)``, whichever start (the tests compare them); ``changed``
    names the turns whose decisions may differ from the start's under the same ``expect`` (None: any
    turn's may), whether or not ``changed_only`` kept the others out of the assessment.
    ``rewind_window`` as for ``assess_incremental``: a fold kept in memory keeps its records' undo log."""
    begin: FoldSnapshot | Assessor | None = start if not isinstance(start, KeptFold) else None
    if isinstance(start, KeptFold):
        evidence_id = evidence_digest(normalise_evidence(evidence))
        begin = warm_fold(_kept_digest(start.key), evidence_id, start.key.encode())
        if begin is None or begin.line_no != start.lines:
            return None
    return _assess_from(begin, new_lines, evidence, expect, changed_only, keep=keep, seal=seal, window=rewind_window)


def _changed(
    named: set[str] | None, before: tuple[Any, ...] | None, assessor: Assessor, wanted: dict[int, int]
) -> frozenset[str] | None:
    """The turns whose decisions may differ from those of the fold before the batch: the turns the new lines
    name, and when a fork moved the live timeline, the turns its branch's records after the fork's point
    named (the live view differs from the one before in those turns only, and so do the intents that are on
    the live timeline). None (every turn) when the run's reason moved, or a fork's records are not known."""
    if named is None or before is None:
        return None
    after = assessor.outlook(wanted)
    if after == before:
        return frozenset(named)
    if after[0] != before[0] or assessor.forked_turns is None:
        return None
    return frozenset(named | assessor.forked_turns)


def _kept_digest(key: str) -> str:
    # A caller's key never meets a snapshot's digest (the other keys of engine/warm.py): it is hashed apart.
    return "kept:" + hashlib.sha256(key.encode()).hexdigest()


def _assess_from(
    start: FoldSnapshot | Assessor | None,
    new_lines: Source,
    evidence: EvidenceMap | None,
    expect: Mapping[int, int] | None,
    changed_only: bool,
    *,
    keep: str | None,
    seal: bool,
    window: int,
) -> Kept:
    normalised = normalise_evidence(evidence)
    evidence_id = evidence_digest(normalised)
    wanted = dict(expect or {})
    before: list[Any] = []

    def opened(points: Counter[tuple[int, int]]) -> Assessor:
        if start is None:
            fresh = Assessor(points, normalised)
            undo_logs_keep(fresh, window)
            return fresh
        if isinstance(start, Assessor):
            assessor = start
        else:
            # This process may still hold the fold that wrote these very bytes (engine/warm.py).
            found = warm_fold(start.digest, evidence_id, start.data)
            if found is not None:
                _header(start.data.partition(b"\n")[0])  # the versions still this engine's (its seal held)
            if found is None or found.line_no != start.lines:
                found = _resumed(start, normalised, evidence_id)
            assessor = found
        before.append(assessor.outlook(wanted))
        undo_logs_keep(assessor, window)
        assessor.resume_points(points)
        return assessor

    with cycle_collection_paused():
        assessor = fold_lines(new_lines, opened)
        named = named_turns(new_lines) if start is not None else None
        note_named(assessor, named)  # the parts to write again at the fold's next seal
        after = _seal(assessor, evidence_id) if seal else None
        changed = _changed(named, before[0] if before else None, assessor, wanted)
        result = assessor.finish(wanted, set(changed) if changed_only and changed is not None else None)
        kept = KeptFold(keep if keep is not None else "", assessor.line_no)
        # Kept for the run's next batch in this process; the fold it pushes out is freed while the
        # collector is paused (once it is back on, it would first walk the whole fold).
        if keep is not None:
            warm_fold(_kept_digest(keep), evidence_id, keep.encode(), assessor)
        elif after is not None:
            warm_fold(after.digest, evidence_id, after.data, assessor)
        del assessor
    return Kept(result, kept, after, changed)


def undo_logs_keep(assessor: Assessor, window: int) -> None:
    """Give the live branch of ``assessor`` (a fold about to go on) an undo log of ``window`` records, and
    the branches its forks create one each; ``window`` 0 keeps none. A log a kept fold already has goes on
    (cut to ``window``); a new one starts at the branch's head, when the view is still the fold through it."""
    assessor.rewind_window = window
    assessor.forked_turns = set() if window else None
    for b, info in assessor.branches.items():
        log = info.undo
        if not window or b != assessor.live:
            info.undo = None
        elif log is None:
            info.undo = UndoLog(window, info.next_lsn - 1 if info.dirty_at != info.next_lsn else None)
        elif log.entries.maxlen != window:
            resized = UndoLog(window, log.origin if len(log.entries) <= window else None)
            resized.entries.extend(log.entries)
            info.undo = resized
