"""Incremental refresh: the worker's assessment starts from the run's fold snapshot and reads only the records
after it, stores the new snapshot with the assessment (one per run, replaced), and folds the whole prefix
when the snapshot cannot serve (other evidence, damaged bytes, another engine)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import engine
import engine.parts as engine_parts
from engine import assess as engine_assess
from engine import forget_warm_folds
from engine.writer import JournalWriter
from journals.models import TURN_ASSESSED_FIELDS, Intent, Phase, Run, Turn, TurnEffective
from journals.projection import turns_project
from ops.demo import workload_lines
from recovery import services as recovery_services
from recovery.background import assessment_run
from recovery.models import Assessment, FoldSnapshot, OperatorEvidence, SnapshotPart
from recovery.output import assessment_output_read
from recovery.services import turn_decision
from recovery.state import picture_rows, turn_states_refresh
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (after, through) seq ranges the assessments read from the store (the engine reads its source twice:
    once to find where forks and checkpoints point, then to fold)."""
    seen: list[tuple[int, int]] = []
    real = recovery_services.stored_lines

    def spy(run_pk: int, after: int, through: int) -> Any:
        seen.append((after, through))
        return real(run_pk, after, through)

    monkeypatch.setattr(recovery_services, "stored_lines", spy)
    return seen


def _decisions(run: Run) -> dict[str, str]:
    newest = Assessment.objects.filter(run=run).latest()
    rows = picture_rows(run_id=run.pk, through=newest.pk).select_related("turn")
    return {row.turn.turn_id: row.decision for row in rows}


def _whole(lines: list[bytes]) -> dict[str, str]:
    return {td.turn: td.decision.value for td in engine_assess(lines).turns}


def test_each_batch_reads_only_the_records_after_the_snapshot(published, reads, settings):
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 0  # a snapshot after every batch
    lines = workload_lines("run-inc", turns=10)
    digests: list[str | None] = []
    for start in range(0, len(lines), 6):
        ingest("run-inc", lines[start : start + 6])
        reads.clear()
        assert assessment_run(run_id="run-inc") == "stored"
        run = Run.objects.get(run_id="run-inc")
        assert set(reads) == {(start, run.last_seq)}  # the new batch alone (the first: the whole, from nothing)
        if start:
            assert reads == [(start, run.last_seq)]  # read from the store once for both of the engine's passes
        newest = Assessment.objects.filter(run=run).latest()
        assert newest.from_snapshot == (digests[-1] if digests else None)
        snapshot = FoldSnapshot.objects.get(run=run)  # one per run, replaced
        assert (snapshot.through_seq, snapshot.lines) == (run.last_seq, run.last_seq)
        digests.append(snapshot.digest)
        assert _decisions(run) == _whole(lines[: start + 6])
    assert FoldSnapshot.objects.count() == 1 and len(set(digests)) == len(digests)


def test_the_gate_folds_a_tail_from_the_snapshot_and_stores_nothing(published, reads):
    lines = workload_lines("run-tail", turns=6)
    ingest("run-tail", lines[:10])
    assessment_run(run_id="run-tail")
    before = FoldSnapshot.objects.get(run__run_id="run-tail")
    ingest("run-tail", lines[10:])
    run = Run.objects.get(run_id="run-tail")
    reads.clear()
    view = turn_decision(turn=Turn.objects.get(run=run, turn_id="t5"))
    assert view.pending and view.assessment.from_snapshot == before.digest
    assert set(reads) == {(10, run.last_seq)}
    after = FoldSnapshot.objects.get(run=run)
    assert (after.digest, after.through_seq) == (before.digest, before.through_seq)
    assert view.row.decision == _whole(lines)["t5"]


def test_new_evidence_folds_the_whole_prefix(published, reads):
    lines = workload_lines("run-ev", turns=8)
    ingest("run-ev", lines[:20])
    assessment_run(run_id="run-ev")
    run = Run.objects.get(run_id="run-ev")
    turn = Turn.objects.get(run=run, turn_id="t0")
    OperatorEvidence.objects.create(
        run=run, turn=turn, intent_id="t0-call", finding="happened", dispatch=1, actor_name="olivia", reason="bank"
    )
    ingest("run-ev", lines[20:])
    reads.clear()
    assert assessment_run(run_id="run-ev") == "stored"
    run.refresh_from_db()
    assert set(reads) == {(0, run.last_seq)}
    assert Assessment.objects.filter(run=run).latest().from_snapshot is None
    assert FoldSnapshot.objects.get(run=run).through_seq == run.last_seq  # a new one, under the new evidence


def test_a_damaged_snapshot_folds_the_whole_prefix(published, reads):
    lines = workload_lines("run-bad", turns=6)
    ingest("run-bad", lines[:10])
    assessment_run(run_id="run-bad")
    snapshot = FoldSnapshot.objects.get(run__run_id="run-bad")
    data = bytearray(snapshot.data)
    data[len(data) // 2] ^= 1
    FoldSnapshot.objects.filter(pk=snapshot.pk).update(data=bytes(data))
    forget_warm_folds()  # a worker that has not kept the run's fold (restarted): it reads the stored bytes
    ingest("run-bad", lines[10:])
    reads.clear()
    assert assessment_run(run_id="run-bad") == "stored"
    run = Run.objects.get(run_id="run-bad")
    assert set(reads) == {(0, run.last_seq)}
    assert Assessment.objects.filter(run=run).latest().from_snapshot is None
    assert _decisions(run) == _whole(lines)
    assert FoldSnapshot.objects.get(run=run).digest != snapshot.digest


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshot parts of two turns each, so that a short run's snapshot has several."""
    monkeypatch.setattr(engine_parts, "GROUP", 2)


def _stored_parts(run: Run) -> dict[int, tuple[int, str]]:
    return {
        number: (pk, digest)
        for pk, number, digest in SnapshotPart.objects.filter(run=run).values_list("pk", "number", "digest")
    }


def test_a_new_snapshot_replaces_only_the_parts_whose_digest_changed(published, small_parts, settings):
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 0  # a snapshot after every batch
    lines = workload_lines("run-parts", turns=10)
    cut = len(lines) * 2 // 3
    ingest("run-parts", lines[:cut])
    assessment_run(run_id="run-parts")
    run = Run.objects.get(run_id="run-parts")
    before = _stored_parts(run)
    ingest("run-parts", lines[cut:])
    assessment_run(run_id="run-parts")
    after = _stored_parts(run)
    manifest = FoldSnapshot.objects.get(run=run).data
    assert sorted(after) == list(range(len(after))) and len(after) > 3
    assert [after[n][1] for n in sorted(after)] == [d for d, _ in orjson.loads(manifest.split(b"\n")[0])["parts"]]
    kept = [n for n in before if n in after and after[n] == before[n]]  # the same row: not written again
    assert 0 not in kept and kept  # the head is written every time, the early turns' parts are not
    assert all(after[n][1] != before[n][1] for n in after if n in before and n not in kept)


def _damage(run: Run, how: str, older: dict[int, bytes]) -> None:
    parts = SnapshotPart.objects.filter(run=run)
    last = parts.order_by("-number").first()
    assert last is not None
    if how == "corrupt":
        parts.filter(pk=last.pk).update(data=bytes(last.data).replace(b"t", b"T", 1))
    elif how == "missing":
        parts.filter(pk=last.pk).delete()
    elif how == "extra":
        SnapshotPart.objects.create(run=run, number=last.number + 1, digest=last.digest, data=last.data)
    else:  # the part of the same number of an older snapshot, its digest with it
        number = next(n for n in sorted(older, reverse=True) if bytes(older[n]) != bytes(parts.get(number=n).data))
        parts.filter(number=number).update(data=older[number])


@pytest.mark.parametrize("how", ["corrupt", "missing", "extra", "older"])
def test_a_damaged_missing_extra_or_older_part_folds_the_whole_prefix_and_is_written_again(
    published, reads, small_parts, settings, how
):
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 0
    lines = workload_lines(f"run-{how}", turns=10)
    ingest(f"run-{how}", lines[:30])
    assessment_run(run_id=f"run-{how}")
    run = Run.objects.get(run_id=f"run-{how}")
    older = dict(SnapshotPart.objects.filter(run=run).values_list("number", "data"))
    ingest(f"run-{how}", lines[30:40])
    assessment_run(run_id=f"run-{how}")
    _damage(run, how, older)
    forget_warm_folds()  # a restarted worker: it reads the stored manifest and parts
    ingest(f"run-{how}", lines[40:])
    reads.clear()
    assert assessment_run(run_id=f"run-{how}") == "stored"
    run.refresh_from_db()
    assert set(reads) == {(0, run.last_seq)}
    assert Assessment.objects.filter(run=run).latest().from_snapshot is None
    assert _decisions(run) == _whole(lines)
    # The whole fold wrote every part again: the stored snapshot loads.
    stored = FoldSnapshot.objects.get(run=run)
    held = SnapshotPart.objects.filter(run=run).order_by("number").values_list("data", flat=True)
    assert engine.snapshot_load(bytes(stored.data), [bytes(part) for part in held]).digest == stored.digest


def _full_output(run: Run) -> Any:
    """The stored output an assessment of the run's prefix would hold, folded whole by the plain engine."""
    inputs = recovery_services.assessment_inputs(run=run)
    return recovery_services.assessment_output(inputs, recovery_services.assessment_fold(inputs, whole=True).result)


def test_the_snapshot_is_written_every_n_records_and_the_kept_fold_serves_between(published, reads, settings):
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 12
    settings.LOOPX_SNAPSHOT_EVERY_SECONDS = 10**6
    lines = workload_lines("run-every", turns=10)
    forget_warm_folds()
    written: list[int] = []
    previous: str | None = None
    for start in range(0, len(lines), 6):
        ingest("run-every", lines[start : start + 6])
        reads.clear()
        assert assessment_run(run_id="run-every") == "stored"
        run = Run.objects.get(run_id="run-every")
        assert set(reads) == {(start, run.last_seq)}  # the kept fold: the new batch alone
        snapshot = FoldSnapshot.objects.get(run=run)
        written.append(snapshot.through_seq)
        newest = Assessment.objects.filter(run=run).latest()
        assert newest.from_snapshot == previous  # the snapshot stored when it began, older than the fold kept
        previous = snapshot.digest
        # A warm continuation equals the whole fold: every turn's decision and the whole stored output.
        assert _decisions(run) == _whole(lines[: start + 6])
        assert assessment_output_read(assessment=newest) == _full_output(run)
    assert written[:6] == [6, 6, 18, 18, 30, 30]


def test_a_worker_without_the_kept_fold_resumes_from_the_older_snapshot(published, reads, settings):
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 10**6
    settings.LOOPX_SNAPSHOT_EVERY_SECONDS = 10**6
    lines = workload_lines("run-cold", turns=10)
    for start in range(0, 30, 10):
        ingest("run-cold", lines[start : start + 10])
        assessment_run(run_id="run-cold")
    stored = FoldSnapshot.objects.get(run__run_id="run-cold")
    assert stored.through_seq == 10  # the first assessment's; none since
    forget_warm_folds()  # a restarted worker
    ingest("run-cold", lines[30:])
    reads.clear()
    assert assessment_run(run_id="run-cold") == "stored"
    run = Run.objects.get(run_id="run-cold")
    assert set(reads) == {(10, run.last_seq)}  # the records since the stored snapshot, not the whole prefix
    newest = Assessment.objects.filter(run=run).latest()
    assert newest.from_snapshot == stored.digest
    assert _decisions(run) == _whole(lines)
    assert assessment_output_read(assessment=newest) == _full_output(run)
    # The states written for the listed turns alone are those a refresh of every turn writes.
    before = set(TurnEffective.objects.filter(run=run).values_list("turn_id", "state", "reason", "gate"))
    turn_states_refresh(run=run)
    assert set(TurnEffective.objects.filter(run=run).values_list("turn_id", "state", "reason", "gate")) == before
    assert len(before) == Turn.objects.filter(run=run).count()


def _forking_lines(run_id: str) -> tuple[list[bytes], int]:
    """Twelve turns (every third with a safe dispatch), then, in the next batch, a fork back to the planning
    of the ninth (its commit and the three turns after it left behind) and four more turns. Returns the lines
    and where the second batch starts."""
    w = JournalWriter(run_id)
    planned: list[int] = []
    for n in range(12):
        planned.append(w.next_lsn[w.branch])
        w.plan(f"t{n}")
        w.commit(f"t{n}", "plan")
        if n % 3 == 0:
            w.dispatch(f"t{n}", f"i{n}", "safe")
    cut = len(w.lines)
    w.fork(planned[8])
    for n in range(12, 16):
        w.plan(f"t{n}")
        w.commit(f"t{n}", "plan")
    return w.lines, cut


def _rows(run: Run) -> tuple[set[Any], set[Any], set[Any]]:
    turns = {repr(row) for row in Turn.objects.filter(run=run).values_list("turn_id", *TURN_ASSESSED_FIELDS)}
    phases = set(
        Phase.objects.filter(turn__run=run).values_list(
            "turn__turn_id", "position", "name", "committed", "record_id", "committed_at"
        )
    )
    intents = set(
        Intent.objects.filter(turn__run=run).values_list(
            "turn__turn_id", "intent_id", "effect_class", "resolution", "branch", "live", "dispatches", "outcome"
        )
    )
    return turns, phases, intents


def test_a_fork_into_an_earlier_batch_continues_the_kept_fold(published, reads, settings):
    """The fork's point lies in the batch before: the kept fold's undo log serves it, so the batch reads its
    own records alone, and only the turns the fork left behind and the new ones are written again."""
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 10**6
    settings.LOOPX_SNAPSHOT_EVERY_SECONDS = 10**6
    lines, cut = _forking_lines("run-fork")
    forget_warm_folds()
    for start, end in ((0, cut), (cut, len(lines))):
        ingest("run-fork", lines[start:end])
        reads.clear()
        assert assessment_run(run_id="run-fork") == "stored"
        run = Run.objects.get(run_id="run-fork")
        assert set(reads) == {(start, run.last_seq)}  # no fold of the whole prefix
        assert _decisions(run) == _whole(lines[:end])
        assert assessment_output_read(assessment=Assessment.objects.filter(run=run).latest()) == _full_output(run)
    assert run.live_branch == 1
    # The rows of the turns it did not write again are those a projection of every turn writes.
    before = _rows(run)
    turns_project(run=run, result=engine_assess(lines), last_seq=run.last_seq)
    assert _rows(run) == before
    assert ("t9", "i9", "safe", "replay", 0, False, 1, None) in before[2]  # left behind: no longer live


def test_a_turn_that_commits_one_more_phase_rewrites_that_phase_row_alone(published, settings):
    """The timeline rows of a turn that changed are written where they differ: the phase it committed, not
    its whole plan; its other phases and its intent keep their rows."""
    settings.LOOPX_SNAPSHOT_EVERY_RECORDS = 10**6
    w = JournalWriter("run-rows")
    w.plan("t1")
    w.commit("t1", "plan")
    w.dispatch("t1", "i1", "safe")
    cut = len(w.lines)
    w.commit("t1", "envelope")
    ingest("run-rows", w.lines[:cut])
    assert assessment_run(run_id="run-rows") == "stored"
    run = Run.objects.get(run_id="run-rows")
    phases_before = dict(Phase.objects.filter(turn__run=run).values_list("name", "pk"))
    intent_before = Intent.objects.get(turn__run=run).pk
    committed = dict(Phase.objects.filter(turn__run=run).values_list("name", "committed"))
    assert committed["plan"] and not committed["envelope"]
    ingest("run-rows", w.lines[cut:])
    assert assessment_run(run_id="run-rows") == "stored"
    after = {
        name: (pk, done)
        for name, pk, done in Phase.objects.filter(turn__run=run).values_list("name", "pk", "committed")
    }
    assert {name: pk for name, (pk, _) in after.items()} == phases_before  # the same rows, updated in place
    assert after["envelope"][1] and after["plan"][1]
    assert Intent.objects.get(turn__run=run).pk == intent_before
    # What it wrote is what a projection of every turn writes.
    run = Run.objects.get(pk=run.pk)
    before = _rows(run)
    turns_project(run=run, result=engine_assess(w.lines), last_seq=run.last_seq)
    assert _rows(run) == before
