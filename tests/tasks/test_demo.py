"""The demo data: every decision of the contract, a fork, a checkpoint, v1 records and a secret, all
through the real ingest service; what the tests check is what `make run` shows."""

from __future__ import annotations

import pytest

from engine import assess
from journals.models import Checkpoint, JournalRecord, PendingAssessment, Run
from ops.demo import demo_journals, demo_seed, workload_lines
from recovery.background import assessment_run
from recovery.models import TurnAssessment


def test_the_demo_journals_reach_every_decision_and_the_reasons_asked_for():
    journals = demo_journals()
    decisions, reasons = set(), set()
    for demo in journals:
        result = assess(demo.lines)
        got = {t.turn: (t.decision.value, t.reason or t.resume_from) for t in result.turns}
        assert got == demo.expect, demo.run_id
        decisions |= {t.decision.value for t in result.turns}
        reasons |= {t.reason for t in result.turns if t.reason}
    assert decisions == {"complete", "finalize", "resume", "blocked", "discarded"}
    assert {"effect_indeterminate", "chain_broken", "unsafe_redispatch", "phase_prefix_violation"} <= reasons
    lines = [line for demo in journals for line in demo.lines]
    assert any(b'"kind":"fork"' in line for line in lines)
    assert any(b'"kind":"checkpoint"' in line for line in lines)
    assert any(b'"v":1' in line for line in lines) and any(b'"v":2' in line for line in lines)
    assert any(b'"api_key"' in line for line in lines)


@pytest.mark.django_db
def test_seeding_ingests_in_batches_and_the_task_decides_like_the_engine():
    run_ids = demo_seed(batch_size=7)
    assert sorted(run_ids) == sorted(d.run_id for d in demo_journals())
    assert Checkpoint.objects.count() == 1
    for demo in demo_journals():
        run = Run.objects.get(run_id=demo.run_id)
        assert JournalRecord.objects.filter(run=run).count() == len(demo.lines)
        assert PendingAssessment.objects.get(run=run).pending  # requested once, by the first batch
        assert assessment_run(run_id=demo.run_id) == "stored"
        rows = TurnAssessment.objects.filter(assessment__run=run).select_related("turn")
        assert {r.turn.turn_id: (r.decision, r.reason or r.resume_from) for r in rows} == demo.expect


def test_the_workload_is_deterministic_and_mixed():
    assert workload_lines("w", turns=12, seed=3) == workload_lines("w", turns=12, seed=3)
    decisions = {t.decision.value for t in assess(workload_lines("w", turns=12)).turns}
    assert decisions == {"complete", "resume", "blocked"}
