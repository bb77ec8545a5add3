"""Incremental assessment (engine/incremental.py, docs/engine.md "Incremental assessment"): resuming from a
fold snapshot and reading only the lines after it gives exactly the full fold of the same prefix, after every
batch; what cannot resume is refused with a documented reason, and the caller's fallback (a fold from the
start) is then what it gets."""

from __future__ import annotations

import gc
import hashlib
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.incremental as incremental
import engine.parts as parts
import engine.warm as warm
from engine import (
    REWIND_WINDOW,
    Decision,
    FoldSnapshot,
    KeptFold,
    SnapshotUnusable,
    assess,
    assess_incremental,
    assess_kept,
    fold_state,
    snapshot_load,
    state_digest,
)
from engine.assess import Assessor, Source, normalise_evidence
from engine.warm import forget_warm_folds, warm_fold
from engine.writer import JournalWriter
from tests.engine.helpers import assert_changed_only, assert_same, fold_in_batches, put, write_journal
from tests.engine.model import JournalModel
from tests.engine.strategies import damaged_lines, mixed_journals, valid_journals

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def _small_parts() -> Iterator[None]:
    """Parts of two turns each: the journals drawn here span several, so that a batch's seal writes some
    parts again and keeps the others (a run's parts hold a thousand turns)."""
    group = parts.GROUP
    parts.GROUP = 2
    yield
    parts.GROUP = group


def cuts_of(data: st.DataObject, size: int) -> list[int]:
    return data.draw(st.lists(st.integers(0, size), max_size=8), label="cuts")


def window_of(data: st.DataObject) -> int:
    """An undo log none, a few records deep (forks and checkpoints reach back beyond it), or the default."""
    return data.draw(st.sampled_from([0, 1, 3, 8, REWIND_WINDOW]), label="rewind window")


# -- the property -------------------------------------------------------------------------------------------


@PROPERTY
@given(mixed_journals(), st.data())
def test_a_valid_journal_folded_in_batches_is_the_full_fold_after_every_batch(
    model: JournalModel, data: st.DataObject
) -> None:
    lines = list(model.w.lines)
    cuts = cuts_of(data, len(lines))
    window = window_of(data)
    expect = {model.live: model.w.next_lsn[model.live] - 1}
    whole = assess_incremental(None, lines, evidence=model.evidence)[1]
    # The fold this process kept in memory (engine/warm.py) or the snapshot's bytes read back: the same.
    for round_trip, cold in ((False, False), (True, False), (True, True)):
        refusals, last = fold_in_batches(
            lines, cuts, round_trip=round_trip, cold=cold, rewind_window=window, evidence=model.evidence
        )
        # Forks and checkpoints reach into the past: a batch boundary between the point and the fork needs
        # a fold from the start when the point lies beyond the kept fold's undo log; nothing else does in a
        # valid journal. A log as long as the journal serves every point, unless the fold was read back
        # from bytes (the log is not in them).
        assert set(refusals) <= {"fork_into_past", "checkpoint_into_past"}
        if window >= len(lines) and not cold:
            assert refusals == []
        # Every fork and checkpoint of a valid journal uses its point: no fold is left kept, and the snapshot
        # is the same bytes whatever the batches: the same manifest and the same parts.
        assert last.data == whole.data and last.parts == whole.parts
        assert_same(
            assess_incremental(last, [], evidence=model.evidence, expect=expect)[0],
            lines,
            evidence=model.evidence,
            expect=expect,
        )


@PROPERTY
@given(valid_journals(max_steps=30), st.data())
def test_a_damaged_journal_folded_in_batches_is_the_full_fold_after_every_batch(
    model: JournalModel, data: st.DataObject
) -> None:
    lines = damaged_lines(list(model.w.lines), data)
    cuts = cuts_of(data, len(lines))
    warm: list[bytes] = []
    cold: list[bytes] = []
    fold_in_batches(lines, cuts, round_trip=True, written=warm, rewind_window=0, evidence=model.evidence)
    fold_in_batches(lines, cuts, round_trip=True, cold=True, written=cold, rewind_window=0, evidence=model.evidence)
    # A fold kept in memory goes on as one read back from its bytes would: the same bytes after every batch
    # (damaged journals leave points named and unused, and lsns read again). With an undo log, the kept fold
    # serves points the one read back cannot: each batch's result is still the full fold's.
    assert warm == cold
    fold_in_batches(lines, cuts, round_trip=False, rewind_window=window_of(data), evidence=model.evidence)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_journals(max_steps=30), st.data())
def test_snapshot_bytes_are_deterministic(model: JournalModel, data: st.DataObject) -> None:
    lines = list(model.w.lines)
    cuts = cuts_of(data, len(lines))
    first = fold_in_batches(lines, cuts, round_trip=False, evidence=model.evidence)[1]
    again = fold_in_batches(lines, cuts, round_trip=True, evidence=model.evidence)[1]
    assert first.data == again.data
    # Resuming with no new line changes nothing, not even a byte.
    assert assess_incremental(again, [], evidence=model.evidence)[1].data == again.data


@PROPERTY
@given(mixed_journals(max_steps=40), st.data())
def test_changed_only_lists_every_decision_the_batch_changed(model: JournalModel, data: st.DataObject) -> None:
    lines = list(model.w.lines)
    if data.draw(st.booleans(), label="damaged"):
        lines = damaged_lines(lines, data)
    cuts = cuts_of(data, len(lines))
    expect = data.draw(st.sampled_from([None, {model.live: model.w.next_lsn[model.live] - 1}, {0: 1}]))
    assert_changed_only(lines, cuts, evidence=model.evidence, expect=expect)


def _five_turns() -> tuple[JournalWriter, int]:
    w = JournalWriter("r")
    for n in range(5):
        w.plan(f"t{n}")
        w.commit(f"t{n}", "plan")
    cut = len(w.lines)
    w.commit("t3", "envelope")
    w.plan("t5")
    return w, cut


def test_changed_only_lists_the_turns_a_batch_names() -> None:
    w, cut = _five_turns()
    _, snapshot = assess_incremental(None, w.lines[:cut])
    got, _ = assess_incremental(snapshot, w.lines[cut:], changed_only=True)
    assert [d.turn for d in got.turns] == ["t3", "t5"]
    assert assert_changed_only(w.lines, [cut]) == 1
    head = len(w.lines)
    _, snapshot = assess_incremental(None, w.lines)
    w.fork(w.next_lsn[0] - 1)  # the live timeline moves to a new branch, with the same fold
    got, _ = assess_incremental(snapshot, w.lines[head:], changed_only=True)
    assert [d.turn for d in got.turns] == []
    # Without an undo log the fold does not know which records a fork left behind: every turn is listed.
    _, snapshot = assess_incremental(None, w.lines[:head], rewind_window=0)
    got, _ = assess_incremental(snapshot, w.lines[head:], changed_only=True, rewind_window=0)
    assert [d.turn for d in got.turns] == [f"t{n}" for n in range(6)]


def test_changed_only_after_a_fork_lists_the_turns_it_left_behind() -> None:
    w, _ = _five_turns()
    head = len(w.lines)
    w.fork(1)  # back to t0's commit: the turns that the records after it named are left behind
    w.commit("t0", "envelope")
    _, snapshot = assess_incremental(None, w.lines[:head])
    got, _ = assess_incremental(snapshot, w.lines[head:], changed_only=True)
    assert [d.turn for d in got.turns] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert [d.decision for d in got.turns[1:]] == [Decision.DISCARDED] * 5
    assert assert_changed_only(w.lines, [head]) == 0
    w.plan("t6")
    head = len(w.lines)
    w.fork(-1)  # back to where branch 1 starts: the envelope and t6 are left behind
    _, snapshot = assess_incremental(None, w.lines[:head])
    got, _ = assess_incremental(snapshot, w.lines[head:], changed_only=True)
    assert [d.turn for d in got.turns] == ["t0", "t6"]
    assert assert_changed_only(w.lines, [head]) == 1


# -- resuming at and before the head ---------------------------------------------------------------------


def _forked_journal() -> tuple[JournalWriter, int]:
    w = JournalWriter("r")
    w.plan("t1")
    w.commit("t1", "plan")
    point = w.mark()
    w.dispatch("t1", "i1", "unsafe")
    return w, point


def test_a_fork_from_the_head_is_served_from_the_live_view() -> None:
    w, point = _forked_journal()
    head = len(w.lines)
    w.fork(point)
    w.plan("t2")
    _, snapshot = assess_incremental(None, w.lines[:head])
    result, _ = assess_incremental(snapshot, w.lines[head:])
    assert_same(result, w.lines)
    assert [b.live for b in result.branches] == [False, True]


def assert_refused(lines: Sequence[bytes], cut: int, reason: str, window: int = 0) -> None:
    """The snapshot of the first `cut` lines cannot continue with the rest, for `reason`, with an undo log of
    `window` records (kept in memory) or none (the snapshot read back); the caller's fallback then gives the
    full fold."""
    _, snapshot = assess_incremental(None, lines[:cut], rewind_window=window)
    with pytest.raises(SnapshotUnusable) as refused:
        assess_incremental(snapshot, lines[cut:], rewind_window=window)
    assert refused.value.reason == reason
    assert fold_in_batches(lines, [cut], round_trip=True, rewind_window=window)[0] == [reason]
    assert fold_in_batches(lines, [cut], round_trip=True, cold=True)[0] == [reason]


def test_a_fork_into_the_past_beyond_the_undo_log_is_refused_and_the_fallback_is_the_full_fold() -> None:
    w, point = _forked_journal()
    w.commit("t1", "envelope")
    head = len(w.lines)
    w.fork(point)  # lsn 2, behind the head (lsn 3): the log must hold its record, the commit and the fork
    assert_refused(w.lines, head, "fork_into_past")
    assert_refused(w.lines, head, "fork_into_past", window=2)
    assert fold_in_batches(w.lines, [head], round_trip=True, rewind_window=3)[0] == []


def _fallbacks(lines: Sequence[bytes], ends: Sequence[int], window: int, files: Path | None = None) -> int:
    """How many batches (cut before each of `ends`) the worker's kept fold could not continue (each one a fold
    from the start); every result is the full fold's, and the last snapshot the full fold's bytes. `files`:
    each batch is read from a file written there (the engine reads a file in blocks), not from a list."""
    forget_warm_folds()
    start: KeptFold | None = None
    fallbacks = done = 0
    last = b""

    def source(first: int, end: int) -> Source:
        if files is None:
            return lines[first:end]
        return write_journal(files / f"{first}-{end}.jsonl", lines[first:end])

    for end in [*ends, len(lines)]:
        try:
            got = assess_kept(start, source(done, end), keep=f"k{end}", seal=True, rewind_window=window)
        except SnapshotUnusable as exc:
            assert exc.reason in {"fork_into_past", "checkpoint_into_past"}
            fallbacks += 1
            got = assess_kept(None, source(0, end), keep=f"k{end}", seal=True, rewind_window=window)
        assert got is not None and got.snapshot is not None
        assert_same(got.result, lines[:end])
        start, done, last = got.kept, end, got.snapshot.data
    assert last == assess_incremental(None, lines)[1].data
    return fallbacks


def _rewinding_run(turns: int) -> tuple[JournalWriter, list[int]]:
    """A run of `turns` full turns (9 records each) cut into batches of 50 turns. The batch after every
    hundredth turn starts with a fork 40 turns back; each other batch with a checkpoint of the point 10 turns
    back. Returns the writer and the batch ends."""
    w = JournalWriter("r")
    points: list[int] = []  # the lsn of each turn's plan on the live branch
    ends: list[int] = []
    for n in range(turns):
        points.append(w.next_lsn[w.branch])
        w.complete_turn(f"t{w.branch}-{n:05d}")  # no float marker in any line: files take the block path
        if n % 50 == 49:
            ends.append(len(w.lines))
            if n % 100 == 99:
                w.fork(points[-40])
                points = []
            else:
                covers = points[-10]
                digest = state_digest(fold_state(w.lines, w.branch, covers))
                w.append("checkpoint", covers_lsn=covers, state_digest=digest)
    return w, ends


def test_a_fork_and_a_checkpoint_within_the_undo_log_do_not_fall_back() -> None:
    w, ends = _rewinding_run(400)
    assert _fallbacks(w.lines, ends, window=REWIND_WINDOW) == 0
    assert _fallbacks(w.lines, ends, window=400) == 0  # a fork reaches 361 records back, a checkpoint 91
    assert [c["verified"] for c in assess(w.lines).checkpoints] == [True] * 4


def test_a_fork_within_the_undo_log_read_from_files(tmp_path: Path) -> None:
    """Read from a file, runs of a writer's records may be folded together: each one is in the log all the
    same, so what a fork or checkpoint undoes is exact."""
    w, ends = _rewinding_run(400)
    assert _fallbacks(w.lines, ends, window=REWIND_WINDOW, files=tmp_path) == 0


def test_a_fork_beyond_the_undo_log_falls_back() -> None:
    w, ends = _rewinding_run(400)
    assert _fallbacks(w.lines, ends, window=0) == 8  # every batch that reaches back
    assert _fallbacks(w.lines, ends, window=100) == 4  # the four forks: 40 turns back lie beyond 100 records


def test_a_checkpoint_within_the_undo_log_is_served_and_verified() -> None:
    w = JournalWriter("r")
    w.plan("t1")
    w.commit("t1", "plan")
    w.commit("t1", "envelope")
    cut = len(w.lines)
    put(w, "checkpoint", covers_lsn=1, state_digest=state_digest(fold_state(w.lines, 0, 1)))
    put(w, "checkpoint", covers_lsn=0, state_digest="0" * 64)  # a wrong digest is found wrong
    assert fold_in_batches(w.lines, [cut], round_trip=True)[0] == []
    _, snapshot = assess_incremental(None, w.lines[:cut])
    result, _ = assess_incremental(snapshot, w.lines[cut:])
    assert [c["verified"] for c in result.checkpoints] == [True, False]
    assert_same(result, w.lines)
    assert_refused(w.lines, cut, "checkpoint_into_past", window=1)


def test_a_checkpoint_into_the_past_is_refused_but_one_of_the_head_is_served() -> None:
    w = JournalWriter("r")
    w.plan("t1")
    head = len(w.lines)
    w.checkpoint(with_state=True)  # of lsn 0, the head when the batch before it was folded
    _, snapshot = assess_incremental(None, w.lines[:head])
    result, snapshot = assess_incremental(snapshot, w.lines[head:])
    assert [c["verified"] for c in result.checkpoints] == [True]
    w.commit("t1", "plan")
    w.commit("t1", "envelope")
    _, snapshot = assess_incremental(snapshot, w.lines[2:], rewind_window=0)
    put(w, "checkpoint", covers_lsn=2, state_digest="0" * 64)  # the first commit: behind the head (lsn 3)
    with pytest.raises(SnapshotUnusable) as refused:
        assess_incremental(snapshot, w.lines[4:], rewind_window=0)
    assert refused.value.reason == "checkpoint_into_past"
    assert [c["verified"] for c in assess(w.lines).checkpoints] == [True, False]
    assert fold_in_batches(w.lines, [1, 2, 4], round_trip=True, rewind_window=0)[0] == ["checkpoint_into_past"]
    assert fold_in_batches(w.lines, [1, 2, 4], round_trip=True)[0] == []  # the undo log reaches lsn 2


def test_a_head_folded_again_by_a_repeated_lsn_is_not_served() -> None:
    """A record repeating an lsn changes the branch's view after its head was read: the view is no longer the
    fold through the head, so a fork from the head needs a fold from the start."""
    w, _ = _forked_journal()
    head_lsn = w.next_lsn[0] - 1
    w.lines.append(w.lines[-1])  # the dispatch again, same lsn: an lsn_gap, and a second dispatch
    cut = len(w.lines)
    w.fork(head_lsn)
    assert_refused(w.lines, cut, "fork_into_past")
    # An undo log reaches it: the repeated record is undone.
    assert fold_in_batches(w.lines, [cut], round_trip=True)[0] == []


def test_a_point_the_snapshot_still_holds_is_served_after_a_resume() -> None:
    """A point that a line of the prefix named without using it (a checkpoint refused as invalid) is kept
    in the snapshot, as in the full fold, and serves a fork in a later batch."""
    w, point = _forked_journal()
    w.commit("t1", "envelope")
    put(w, "checkpoint", covers_lsn=point, state_digest=7)  # record_invalid: never uses the point
    cut = len(w.lines)
    w.fork(point)
    w.plan("t2")
    refusals, _ = fold_in_batches(w.lines, [cut], round_trip=True)
    assert refusals == []
    refusals, _ = fold_in_batches(w.lines, [4, cut], round_trip=True, rewind_window=0)
    assert refusals == ["fork_into_past"]  # cut past the point before it was named


# -- refusals ----------------------------------------------------------------------------------------------


def _small() -> JournalWriter:
    w = JournalWriter("r")
    w.plan("t1")
    w.commit("t1", "plan")
    w.dispatch("t1", "i1", "unsafe")
    return w


def _many_turns(count: int) -> JournalWriter:
    w = JournalWriter("r")
    for n in range(count):
        w.plan(f"t{n}")
        w.commit(f"t{n}", "plan")
        w.dispatch(f"t{n}", "i1", "unsafe")
    return w


def test_every_flipped_byte_is_corrupt() -> None:
    w = _small()
    _, snapshot = assess_incremental(None, w.lines)
    for at in range(len(snapshot.data)):
        flipped = bytearray(snapshot.data)
        flipped[at] ^= 0xFF
        with pytest.raises(SnapshotUnusable) as refused:
            snapshot_load(bytes(flipped), snapshot.parts)
        assert refused.value.reason == "corrupt", at
    for number, part in enumerate(snapshot.parts):
        for at in range(len(part)):
            flipped = bytearray(part)
            flipped[at] ^= 0xFF
            damaged = [*snapshot.parts[:number], bytes(flipped), *snapshot.parts[number + 1 :]]
            with pytest.raises(SnapshotUnusable) as refused:
                snapshot_load(snapshot.data, damaged)
            assert refused.value.reason == "corrupt", (number, at)
    data = snapshot.data.replace(b'"lines"', b'"Lines"', 1)
    forged = FoldSnapshot(
        data, hashlib.sha256(data).hexdigest(), snapshot.lines, snapshot.parts
    )  # a digest made to match
    forget_warm_folds()
    with pytest.raises(SnapshotUnusable) as refused:
        assess_incremental(forged, [])
    assert refused.value.reason == "corrupt"
    for wrong in (
        replace(snapshot, digest="0" * 64),
        replace(snapshot, lines=9),
        replace(snapshot, parts=snapshot.parts[:1]),
    ):
        forget_warm_folds()
        with pytest.raises(SnapshotUnusable) as refused:
            assess_incremental(wrong, [])
        assert refused.value.reason == "corrupt"


def _refused_then_whole(snapshot: FoldSnapshot, lines: list[bytes], done: int) -> str:
    """The reason ``snapshot`` (read cold) is refused, after checking that the caller's fallback, a fold from
    the start, is the full fold."""
    forget_warm_folds()
    with pytest.raises(SnapshotUnusable) as refused:
        assess_incremental(snapshot, lines[done:])
    result, _ = assess_incremental(None, lines)
    assert_same(result, lines)
    return refused.value.reason


def test_a_missing_extra_corrupt_or_older_part_is_refused_and_the_whole_fold_follows() -> None:
    """A store that lost a part, kept one too many, damaged one, or holds a part of an older snapshot under
    the same number: the manifest names every part by its digest, so each is "corrupt"."""
    w = _many_turns(7)  # four parts of two turns and the head
    older = assess_incremental(None, w.lines[:-2])[1]
    _, snapshot = assess_incremental(None, w.lines[:-1])
    assert len(snapshot.parts) == 5 and len(older.parts) == 5
    stale = [n for n in range(5) if older.parts[n] != snapshot.parts[n]]
    assert 0 < len(stale) < 5  # the head and the last turns' part changed, the others did not
    shapes = {
        "missing": snapshot.parts[:-1],
        "extra": (*snapshot.parts, snapshot.parts[-1]),
        "corrupt": (*snapshot.parts[:-1], snapshot.parts[-1].replace(b"t6", b"t9")),
        "older": tuple(older.parts[n] if n == stale[-1] else part for n, part in enumerate(snapshot.parts)),
    }
    for name, held in shapes.items():
        with pytest.raises(SnapshotUnusable) as refused:
            snapshot_load(snapshot.data, held)
        assert refused.value.reason == "corrupt", name
        reason = _refused_then_whole(replace(snapshot, parts=tuple(held)), w.lines, snapshot.lines)
        assert reason == "corrupt", name
    result, _ = assess_incremental(snapshot_load(snapshot.data, snapshot.parts), w.lines[-1:])
    assert_same(result, w.lines)


def test_a_seal_writes_again_only_the_parts_whose_turns_changed() -> None:
    """A fold that goes on writes again the head and the parts of the turns the new lines name; every other
    part is the same bytes, and the result is the full fold's."""
    w = _many_turns(9)
    _, before = assess_incremental(None, w.lines)
    w.commit("t8", "dispatch")  # the last part's turn
    w.commit("t1", "dispatch")  # the first part's
    result, after = assess_incremental(before, w.lines[-2:])
    assert_same(result, w.lines)
    changed = [n for n, (old, new) in enumerate(zip(before.parts, after.parts, strict=True)) if old != new]
    assert changed == [0, 1, 5]
    assert after.parts == assess_incremental(None, w.lines)[1].parts


@pytest.mark.parametrize("name", ["ENGINE_VERSION", "PROJECTION_VERSION", "FORMAT"])
def test_a_snapshot_of_another_version_is_refused(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    w = _small()
    with monkeypatch.context() as patched:
        patched.setattr(incremental, name, 0 if name == "FORMAT" else "0.0.0")
        _, old = assess_incremental(None, w.lines)
    for attempt in (lambda: snapshot_load(old.data, old.parts), lambda: assess_incremental(old, [])):
        with pytest.raises(SnapshotUnusable) as refused:
            attempt()
        assert refused.value.reason == "version"
    w.commit("t1", "dispatch")
    assert _refused_then_whole(old, w.lines, old.lines) == "version"


def test_a_snapshot_folded_under_other_evidence_is_refused() -> None:
    """Evidence changes the fold itself: an unsafe retry after `not_happened` is legal, without it an
    unsafe_redispatch. So the evidence is part of a snapshot's identity (in any order it is given)."""
    w = _small()
    w.dispatch("t1", "i1", "unsafe")
    found = {("t1", "i1"): "not_happened", "other": "happened"}
    assert assess(w.lines).violations and not assess(w.lines, evidence=found).violations
    _, snapshot = assess_incremental(None, w.lines[:3], evidence=found)
    for other in (None, {("t1", "i1"): "happened"}, {("t1", "i1"): ("not_happened", 1)}):
        with pytest.raises(SnapshotUnusable) as refused:
            assess_incremental(snapshot, w.lines[3:], evidence=other)
        assert refused.value.reason == "evidence"
    reordered = dict(reversed(found.items()))
    result, _ = assess_incremental(snapshot, w.lines[3:], evidence=reordered)
    assert_same(result, w.lines, evidence=found)


# -- what the snapshot holds -------------------------------------------------------------------------------


def _all_parts(assessor: Assessor) -> list[bytes]:
    """Every part of the fold written afresh (none kept from an earlier seal)."""
    assessor.sealed = None
    return [part.data for part in parts.seal_parts(assessor)]


def _read_back(snapshot: FoldSnapshot) -> FoldSnapshot:
    return snapshot_load(snapshot.data, snapshot.parts)


def test_finish_leaves_the_fold_as_it_was() -> None:
    w = _small()
    w.plan("t2")
    assessor = Assessor(Counter(), normalise_evidence(None))
    for line in w.lines:
        assessor.feed(line)
    rows = _all_parts(assessor)
    first = assessor.finish({0: 99, 3: 1})
    assert _all_parts(assessor) == rows
    assert assessor.finish({0: 99, 3: 1}) == first
    assert [v.code for v in first.violations][-2:] == ["offset_mismatch", "offset_mismatch"]


def test_new_lines_may_come_from_a_file_or_a_callable(tmp_path: Path) -> None:
    w, point = _forked_journal()
    w.fork(point)
    w.plan("t2")
    _, snapshot = assess_incremental(None, w.lines[:2])
    path = write_journal(tmp_path / "rest.jsonl", w.lines[2:])
    for source in (path, str(path), lambda: iter(w.lines[2:])):
        result, after = assess_incremental(snapshot, source)
        assert_same(result, w.lines)
        assert after.lines == len(w.lines)


def test_a_snapshot_is_a_sealed_json_manifest_and_json_parts() -> None:
    """Read back without executing anything: a JSON manifest naming the versions and each part by its
    sha256, its seal, and parts of JSON rows."""
    w, _ = _forked_journal()
    _, snapshot = assess_incremental(None, w.lines, evidence={"i1": "happened"})
    header, seal = snapshot.data.split(b"\n")
    assert hashlib.sha256(header + b"\n").hexdigest().encode() == seal
    fields: Mapping[str, Any] = orjson.loads(header)
    assert fields["engine"] == incremental.ENGINE_VERSION and fields["lines"] == len(w.lines)
    assert fields["projection"] == incremental.PROJECTION_VERSION and fields["format"] == incremental.FORMAT
    assert fields["evidence"] == incremental.evidence_digest(normalise_evidence({"i1": "happened"}))
    assert fields["parts"] == [[hashlib.sha256(part).hexdigest(), "orjson"] for part in snapshot.parts]
    assert list(snapshot.part_digests) == [digest for digest, _ in fields["parts"]]
    assert all(isinstance(orjson.loads(part), list) for part in snapshot.parts)


def test_integers_beyond_64_bits_round_trip_exactly() -> None:
    """orjson reads an integer beyond 64 bits as a float; rows holding one are written and read as JSON by
    the standard library, so a violation naming such an lsn comes back as it was."""
    w = _small()
    put(w, "phase_committed", envelope={"lsn": 2**70}, turn="t1", phase="envelope")
    _, snapshot = assess_incremental(None, w.lines)
    assert [codec for _, codec in orjson.loads(snapshot.data.split(b"\n")[0])["parts"]] == ["json", "orjson"]
    w.commit("t1", "dispatch")
    result, _ = assess_incremental(snapshot_load(snapshot.data, snapshot.parts), w.lines[-1:])
    assert_same(result, w.lines)
    assert 2**70 in [v.lsn for v in result.violations]


# -- the fold kept in memory (engine/warm.py) ------------------------------------------------------------


def test_a_kept_fold_is_served_once_and_only_for_its_own_bytes() -> None:
    w = _small()
    forget_warm_folds()
    _, snapshot = assess_incremental(None, w.lines)
    evidence = incremental.evidence_digest(normalise_evidence(None))
    forged = snapshot.data.replace(b'"lines"', b'"lines" ')  # other bytes under the same digest
    assert warm_fold(snapshot.digest, evidence, forged) is None  # and taken out: served once at most
    _, snapshot = assess_incremental(None, w.lines)
    assert warm_fold(snapshot.digest, "0" * 64, snapshot.data) is None  # other evidence
    _, snapshot = assess_incremental(None, w.lines)
    kept = warm_fold(snapshot.digest, evidence, snapshot.data)
    assert kept is not None and kept.line_no == len(w.lines)
    assert warm_fold(snapshot.digest, evidence, snapshot.data) is None


def test_only_the_last_few_folds_are_kept() -> None:
    forget_warm_folds()
    evidence = incremental.evidence_digest(normalise_evidence(None))
    snapshots = []
    for n in range(warm.KEEP + 1):
        w = _small()
        w.plan(f"extra-{n}")
        snapshots.append(assess_incremental(None, w.lines)[1])
    assert warm_fold(snapshots[0].digest, evidence, snapshots[0].data) is None
    assert all(warm_fold(s.digest, evidence, s.data) is not None for s in snapshots[1:])


def test_a_kept_fold_holds_the_points_a_fold_read_back_holds() -> None:
    """Points used (a fork's) and points found unreachable in the batch before are what a fold read back
    from its bytes would not hold: a kept fold drops them, so both go on alike."""
    w, point = _forked_journal()
    full = Assessor(Counter(), {})
    for line in w.lines:
        full.feed(line)
    full.resume_points(Counter({(0, point): 1, (0, 0): 1}))  # lsn 0: behind the head, not kept
    assert full.unreachable == {(0, 0)}
    full.points[(0, 0)] -= 1  # as a use of it would leave it: spent
    full.settle_points()
    assert full.points == Counter({(0, point): 1}) and not full.unreachable
    back = parts.open_parts([(part.digest, part.codec, part.data) for part in parts.seal_parts(full)], {})
    assert back.points == full.points


# -- a fold kept under its caller's key, its snapshot written now and then (assess_kept) --------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_journals(), st.data())
def test_a_kept_fold_written_now_and_then_is_the_full_fold_after_every_batch(
    model: JournalModel, data: st.DataObject
) -> None:
    lines = list(model.w.lines)
    ends = [*sorted(set(cuts_of(data, len(lines)))), len(lines)]
    seals = data.draw(st.lists(st.booleans(), min_size=len(ends), max_size=len(ends)), label="seals")
    window = window_of(data)
    forget_warm_folds()
    start: FoldSnapshot | KeptFold | None = None
    stored: FoldSnapshot | None = None
    done = 0
    for number, (end, seal) in enumerate(zip(ends, seals, strict=True)):
        key = f"kept:{number}:{end}"
        try:
            got = assess_kept(
                start, lines[done:end], keep=key, seal=seal, evidence=model.evidence, rewind_window=window
            )
        except SnapshotUnusable as exc:
            assert exc.reason in {"fork_into_past", "checkpoint_into_past"}
            assert window < len(lines)  # a log as long as the journal reaches every point
            got = assess_kept(None, lines[:end], keep=key, seal=seal, evidence=model.evidence, rewind_window=window)
        assert got is not None  # the fold kept by the batch before is served
        result, kept, after, _ = got
        assert_same(result, lines[:end], evidence=model.evidence)
        assert kept == KeptFold(key, end)
        if seal:
            # Written after batches that wrote nothing: the bytes of the full fold of the same lines.
            whole = assess_incremental(None, lines[:end], evidence=model.evidence)[1]
            assert after is not None and after.data == whole.data
            stored = after
        else:
            assert after is None
        start, done = kept, end
    if stored is not None:
        # A process that does not keep the fold (restarted) resumes from the older stored snapshot.
        forget_warm_folds()
        assert assess_kept(start, [], keep="other", seal=False, evidence=model.evidence) is None
        try:
            cold = assess_incremental(
                snapshot_load(stored.data, stored.parts), lines[stored.lines :], evidence=model.evidence
            )[0]
        except SnapshotUnusable:
            cold = assess_incremental(None, lines, evidence=model.evidence)[0]
        assert_same(cold, lines, evidence=model.evidence)


def test_a_kept_fold_is_served_only_for_its_key_evidence_and_line_count() -> None:
    forget_warm_folds()
    w = JournalWriter("r")
    for n in range(4):
        w.plan(f"t{n}")
        w.commit(f"t{n}", "plan")
    lines = list(w.lines)
    got = assess_kept(None, lines[:5], keep="run:5", seal=False)
    assert got is not None and got[2] is None
    assert assess_kept(KeptFold("run:5", 4), lines[5:], keep="run:x", seal=False) is None  # another line count
    got = assess_kept(None, lines[:5], keep="run:5", seal=False)
    other = {("t0", "i"): "happened"}
    assert assess_kept(KeptFold("run:5", 5), lines[5:], keep="x", seal=False, evidence=other) is None
    got = assess_kept(None, lines[:5], keep="run:5", seal=False)
    resumed = assess_kept(KeptFold("run:5", 5), lines[5:], keep="run:all", seal=True)
    assert resumed is not None and resumed[2] is not None
    assert resumed[2].data == assess_incremental(None, lines)[1].data
    assert assess_kept(KeptFold("run:5", 5), lines[5:], keep="again", seal=False) is None  # served once


def _cycles_left_by(make: Any) -> int:
    """The objects the cyclic collector finds unreachable after ``make()`` ran and its result was dropped."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        made = make()
        del made
        return gc.collect()
    finally:
        if was:
            gc.enable()


def _kept_fold(lines: Sequence[bytes], cuts: Sequence[int], evidence: Any = None) -> Assessor:
    """The fold a worker keeps after folding ``lines`` in batches cut before each of ``cuts`` (with its undo
    log; a fork beyond it folds the prefix from the start, as the worker does)."""
    forget_warm_folds()
    start: KeptFold | None = None
    done = 0
    for end in [*sorted(set(cuts)), len(lines)]:
        keep, seal = f"k{end}", end == len(lines)
        try:
            got = assess_kept(start, lines[done:end], keep=keep, seal=seal, evidence=evidence)
        except SnapshotUnusable:
            got = assess_kept(None, lines[:end], keep=keep, seal=seal, evidence=evidence)
        assert got is not None
        start, done = got.kept, end
    assert start is not None
    evidence_id = incremental.evidence_digest(normalise_evidence(evidence))
    kept = warm_fold(incremental._kept_digest(start.key), evidence_id, start.key.encode())
    assert kept is not None
    return kept


def test_a_kept_fold_holds_no_cycle_so_the_collector_may_look_away() -> None:
    """engine/warm.py moves a kept fold out of the cyclic collector's sight: that is sound only because
    reference counting alone frees every object of a fold once it is dropped (a fold with forks, rewinds
    and checkpoints, its undo log, and a fold read back from a snapshot's bytes)."""
    w, ends = _rewinding_run(200)
    assert _cycles_left_by(lambda: _kept_fold(w.lines, ends)) == 0
    assert _cycles_left_by(lambda: _read_back(assess_incremental(None, w.lines)[1])) == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_journals(), st.data())
def test_no_journal_leaves_a_kept_fold_with_a_cycle(model: JournalModel, data: st.DataObject) -> None:
    lines = list(model.w.lines)
    cuts = cuts_of(data, len(lines))
    assert _cycles_left_by(lambda: _kept_fold(lines, cuts, model.evidence)) == 0


def test_keeping_a_fold_moves_it_out_of_the_collectors_sight() -> None:
    w, _ = _rewinding_run(100)
    gc.unfreeze()
    forget_warm_folds()
    assess_kept(None, w.lines, keep="k", seal=False)
    assert gc.get_freeze_count() > 0
    kept = warm_fold(incremental._kept_digest("k"), incremental.evidence_digest(normalise_evidence(None)), b"k")
    assert kept is not None
    assert not any(o is kept for o in gc.get_objects())  # no generation the collector walks holds it
    gc.unfreeze()


def test_a_full_collection_waits_longer_in_a_larger_heap() -> None:
    """Its cost is the heap's size, so the keeps between two grow with the objects the last one left alive:
    each keep pays the same share of it however long the run (engine/warm.py)."""
    every, per = warm.FULL_COLLECTION_EVERY, warm.FULL_COLLECTION_PER_OBJECTS
    assert not warm.full_collection_due(keeps=every - 1, left_alive=0)
    assert warm.full_collection_due(keeps=every, left_alive=0)
    assert warm.full_collection_due(keeps=every, left_alive=every * per)
    assert not warm.full_collection_due(keeps=every, left_alive=3 * every * per)
    assert not warm.full_collection_due(keeps=3 * every - 1, left_alive=3 * every * per)
    assert warm.full_collection_due(keeps=3 * every, left_alive=3 * every * per)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_a_cycle_frozen_with_a_kept_fold_is_freed_by_the_next_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle alive when a fold is kept is frozen with it; once dropped, only a full collection frees it.
    One runs on the keep it is due, and on no other."""
    w, _ = _rewinding_run(20)
    monkeypatch.setattr(warm, "FULL_COLLECTION_EVERY", 3)
    monkeypatch.setattr(warm, "_keeps", 0)
    monkeypatch.setattr(warm, "_left_alive", 0)
    full: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            full.append(1)

    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.unfreeze()
    forget_warm_folds()
    gc.callbacks.append(seen)
    enabled = gc.isenabled()
    gc.disable()  # only the keeps' own collections run meanwhile
    try:
        assess_kept(None, w.lines, keep="k1", seal=False)  # the cycle is frozen with the fold
        del a, b
        assess_kept(None, w.lines, keep="k2", seal=False)
        assert gone() is not None and not full  # frozen: the young collections do not see it
        assess_kept(None, w.lines, keep="k3", seal=False)  # the third keep: a full collection is due
        assert gone() is None and len(full) == 1
        assert warm._keeps == 0 and warm._left_alive > 0
    finally:
        if enabled:
            gc.enable()
        gc.callbacks.remove(seen)
        forget_warm_folds()
        gc.unfreeze()
