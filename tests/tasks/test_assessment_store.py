"""Assessments store only what changed: a batch writes TurnAssessment rows for the turns whose engine picture
moved (and for new turns), every turn's current picture stays one read away, and superseded assessments are
compacted to their identity, digests and counts."""

from __future__ import annotations

import pytest

from engine import assess as engine_assess
from journals.models import Run, Turn
from ops.demo import workload_lines
from recovery.background import assessment_run
from recovery.models import COMPACTED_OUTPUT, Assessment, GateDecision, TurnAssessment
from recovery.output import assessment_output_read
from recovery.services import assessment_refresh, assessments_compact, turn_block
from recovery.state import AssessmentCompacted, assessment_violations, picture_row, picture_rows
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db

BATCH = 5


def _pictures(lines: list[bytes]) -> dict[str, tuple[object, ...]]:
    """What the pure engine says of each turn for a prefix: the fields a TurnAssessment row holds."""
    result = engine_assess(lines)
    return {
        td.turn: (
            td.decision.value,
            td.reason,
            td.resume_from,
            list(td.completed_phases),
            td.reason_line,
            td.terminal,
        )
        for td in result.turns
    }


def _stored(run: Run) -> dict[str, tuple[object, ...]]:
    """Each turn's row in force under the run's newest assessment, as the gate and the pages read it."""
    newest = Assessment.objects.filter(run=run).latest()
    return {
        row.turn.turn_id: (
            row.decision,
            row.reason,
            row.resume_from,
            row.completed_phases,
            row.reason_line,
            row.terminal,
        )
        for row in picture_rows(run_id=run.pk, through=newest.pk).select_related("turn")
    }


def _grow(run_id: str, lines: list[bytes]) -> list[tuple[int, int]]:
    """Ingest ``lines`` batch by batch, the task assessing after each; (rows written, turns changed) per batch,
    the changed turns counted by the pure engine between the two prefixes."""
    counted: list[tuple[int, int]] = []
    before: dict[str, tuple[object, ...]] = {}
    for end in range(BATCH, len(lines) + BATCH, BATCH):
        prefix = lines[:end]
        rows = TurnAssessment.objects.filter(assessment__run__run_id=run_id).count()
        ingest(run_id, prefix[-BATCH:] if end <= len(lines) else lines[end - BATCH :])
        assert assessment_run(run_id=run_id) == "stored"
        now = _pictures(prefix)
        changed = sum(1 for turn, picture in now.items() if before.get(turn) != picture)
        counted.append((TurnAssessment.objects.filter(assessment__run__run_id=run_id).count() - rows, changed))
        before = now
    return counted


def test_a_batch_writes_rows_only_for_the_turns_it_changed(published):
    lines = workload_lines("run-grow", turns=14)
    counted = _grow("run-grow", lines)
    assert len(counted) > 10  # many batches
    assert all(written == changed for written, changed in counted), counted
    run = Run.objects.get(run_id="run-grow")
    turns = Turn.objects.filter(run=run).count()
    assert turns == 14
    # One row per change, not one per turn per assessment.
    total = TurnAssessment.objects.filter(assessment__run=run).count()
    assert total == sum(w for w, _ in counted) < turns * len(counted) // 2
    # Every turn's picture is exactly what a full fold of the whole journal says.
    assert _stored(run) == _pictures(lines)
    newest = Assessment.objects.filter(run=run).latest()
    assert newest.turn_count == 14 and newest.rows_written == counted[-1][0]


def test_every_assessment_keeps_its_exact_picture(published):
    lines = workload_lines("run-each", turns=6)
    ingest("run-each", lines[:12])
    first = assessment_refresh(run=Run.objects.get(run_id="run-each"))
    ingest("run-each", lines[12:])
    run = Run.objects.get(run_id="run-each")
    assessment_refresh(run=run)
    under_first = {
        row.turn.turn_id: row.decision for row in picture_rows(run_id=run.pk, through=first.pk).select_related("turn")
    }
    assert under_first == {turn: picture[0] for turn, picture in _pictures(lines[:12]).items()}
    # A turn the second assessment did not change answers with its row from the first.
    unchanged = Turn.objects.get(run=run, turn_id="t0")
    row = picture_row(turn=unchanged, through=None)
    assert row is not None and row.assessment_id == first.pk


def test_superseded_assessments_are_compacted_and_what_names_them_stays(published, settings, operator):
    settings.LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS = 0
    lines = workload_lines("run-compact", turns=8)
    ingest("run-compact", lines[:10])
    assert assessment_run(run_id="run-compact") == "stored"
    run = Run.objects.get(run_id="run-compact")
    turn = Turn.objects.get(run=run, turn_id="t0")
    blocked = turn_block(turn=turn, actor=operator, reason="looking at it")  # names the first assessment
    first = blocked.assessment
    history = TurnAssessment.objects.filter(assessment__run=run).count()
    for end in range(20, len(lines) + 10, 10):
        ingest("run-compact", lines[end - 10 : end])
        assert assessment_run(run_id="run-compact") == "stored"
    assessments = list(Assessment.objects.filter(run=run).order_by("id"))
    newest = assessments[-1]
    assert len(assessments) > 3
    # Only the assessment the run shows keeps its output; the others keep identity, digests and counts.
    assert newest.compacted_at is None and assessment_output_read(assessment=newest)["turns"]
    for old in assessments[:-1]:
        assert old.output == COMPACTED_OUTPUT and old.compacted_at is not None
        assert old.prefix_key and len(old.output_digest) == 64 and old.turn_count > 0
    assert GateDecision.objects.get(turn=turn, kind="block").assessment_id == first.pk
    # The rows stay: each is a change of a turn's decision.
    assert TurnAssessment.objects.filter(assessment__run=run).count() >= history
    with pytest.raises(AssessmentCompacted):
        assessment_violations(Assessment.objects.defer("output").get(pk=first.pk))
    assert assessment_violations(Assessment.objects.defer("output").get(pk=newest.pk)) == []


def test_compaction_waits_for_the_grace(published, settings):
    settings.LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS = 3600
    lines = workload_lines("run-grace", turns=4)
    ingest("run-grace", lines[:8])
    assessment_run(run_id="run-grace")
    ingest("run-grace", lines[8:])
    assessment_run(run_id="run-grace")
    run = Run.objects.get(run_id="run-grace")
    assert not Assessment.objects.filter(run=run, compacted_at__isnull=False).exists()
    settings.LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS = 0
    assert assessments_compact(run=run) == 1
    assert assessments_compact(run=run) == 0
    assert Assessment.objects.filter(run=run, compacted_at__isnull=True).count() == 1
