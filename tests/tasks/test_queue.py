"""The assessment queue in-process: coalescing by the pending flag, enqueue on commit, newest prefix only,
one assessment per prefix and engine version however often or concurrently the task runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction

from engine import assess_kept as engine_assess_kept
from journals.assessment_flag import assessment_request, assessments_overdue
from journals.models import PendingAssessment, Run
from ops.demo import run_healthy, workload_lines
from recovery.background import assessment_run
from recovery.models import Assessment, TurnAssessment
from recovery.services import ENGINE_VERSION, PrefixSuperseded, assessment_refresh
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db


def test_many_batches_publish_one_task_after_commit(published, django_capture_on_commit_callbacks):
    lines = workload_lines("run-q", turns=6)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run = ingest("run-q", lines, batch_size=4)
    assert len(lines) > 12  # several batches
    assert published.run_ids == ["run-q"]
    assert len(callbacks) == 1
    flag = PendingAssessment.objects.get(run=run)
    assert flag.pending and flag.enqueues == 1 and flag.requested_seq == 4  # raised by the first batch
    assert flag.enqueued_at >= flag.requested_at


def test_nothing_is_published_before_commit(published):
    with transaction.atomic():
        ingest("run-uncommitted", workload_lines("run-uncommitted"))
        assert published.run_ids == []
        transaction.set_rollback(True)
    assert published.run_ids == []
    assert not Run.objects.filter(run_id="run-uncommitted").exists()


def test_the_task_lowers_the_flag_and_a_later_batch_raises_it_again(published, django_capture_on_commit_callbacks):
    lines = workload_lines("run-r", turns=4)
    half = len(lines) // 2
    with django_capture_on_commit_callbacks(execute=True):
        ingest("run-r", lines[:half])
    assert assessment_run(run_id="run-r") == "stored"
    flag = PendingAssessment.objects.get(run__run_id="run-r")
    assert not flag.pending and flag.outcome == "stored" and flag.finished_at >= flag.started_at
    with django_capture_on_commit_callbacks(execute=True):
        run = ingest("run-r", lines[half:])
    assert published.run_ids == ["run-r", "run-r"]
    assert assessment_run(run_id="run-r") == "stored"
    run.refresh_from_db()
    assert run.assessed_seq == run.last_seq == len(lines)
    assert Assessment.objects.filter(run=run).count() == 2  # one per committed prefix


def test_a_redelivered_task_stores_nothing_twice(published):
    run = ingest("run-twice", workload_lines("run-twice", turns=3))
    assert assessment_run(run_id="run-twice") == "stored"
    assert assessment_run(run_id="run-twice") == "unchanged"
    assert Assessment.objects.filter(run=run).count() == 1
    assert TurnAssessment.objects.filter(assessment__run=run).count() == 3


def test_a_prefix_that_moved_while_the_engine_ran_is_not_stored(published, monkeypatch):
    lines = workload_lines("run-moved", turns=4)
    half = len(lines) // 2
    run = ingest("run-moved", lines[:half])

    def assess_then_ingest(*args, **kwargs):
        answer = engine_assess_kept(*args, **kwargs)
        ingest("run-moved", lines[half:])  # a batch commits while the engine runs
        return answer

    monkeypatch.setattr("recovery.services.assess_kept", assess_then_ingest)
    assert assessment_run(run_id="run-moved") == "superseded"
    assert not Assessment.objects.filter(run=run).exists()
    # The newer batch raised the flag again, so a task for it is owed (and the sweep would see it).
    assert PendingAssessment.objects.get(run=run).pending
    monkeypatch.undo()
    assert assessment_run(run_id="run-moved") == "stored"
    stored = Assessment.objects.get(run=run)
    assert stored.prefix_last_seq == len(lines)


def test_newest_only_raises_only_when_asked(published, monkeypatch):
    lines = workload_lines("run-n", turns=2)
    run = ingest("run-n", lines[:5])

    def assess_then_ingest(*args, **kwargs):
        answer = engine_assess_kept(*args, **kwargs)
        ingest("run-n", lines[5:])
        return answer

    monkeypatch.setattr("recovery.services.assess_kept", assess_then_ingest)
    with pytest.raises(PrefixSuperseded):
        assessment_refresh(run=run, newest_only=True)
    monkeypatch.setattr("recovery.services.assess_kept", engine_assess_kept)
    # The gate's synchronous refresh (newest_only=False) always answers.
    assert assessment_refresh(run=run).prefix_last_seq == len(lines)


def test_the_store_refuses_a_second_assessment_of_the_same_identity(published):
    run = ingest("run-id", workload_lines("run-id"))
    first = assessment_refresh(run=run)
    duplicate = {
        f.name: getattr(first, f.name)
        for f in Assessment._meta.concrete_fields
        if f.name not in ("id",)
    }
    with pytest.raises(IntegrityError), transaction.atomic():
        Assessment.objects.create(**duplicate)
    assert first.engine_version == ENGINE_VERSION


def test_a_broker_outage_leaves_the_flag_raised_for_the_sweep(published, django_capture_on_commit_callbacks):
    published.fail = True
    with django_capture_on_commit_callbacks(execute=True):
        run = ingest("run-down", workload_lines("run-down"))  # the ingest itself succeeds
    flag = PendingAssessment.objects.get(run=run)
    assert flag.pending and flag.enqueued_at is None and flag.enqueues == 0
    published.fail = False
    overdue = assessments_overdue(grace=timedelta(0), republish_after=timedelta(hours=1), limit=10)
    assert overdue == [(run.pk, "run-down", True)]


def test_request_outside_ingest_takes_the_lock_and_coalesces(published, django_capture_on_commit_callbacks):
    run = ingest("run-req", workload_lines("run-req"))
    assessment_run(run_id="run-req")
    with django_capture_on_commit_callbacks(execute=True):
        assert assessment_request(run=run) is True
        assert assessment_request(run=run) is False  # already pending: nothing more to publish
    assert published.run_ids == ["run-req"]


def test_a_missing_run_is_a_no_op():
    assert assessment_run(run_id="no-such-run") == "missing"


def test_demo_journal_decisions_are_stored_for_every_turn(published):
    demo = run_healthy("demo-q")
    run = ingest(demo.run_id, demo.lines, batch_size=5)
    assert assessment_run(run_id=demo.run_id) == "stored"
    rows = {
        r.turn.turn_id: (r.decision, r.reason or r.resume_from)
        for r in TurnAssessment.objects.filter(assessment__run=run).select_related("turn")
    }
    assert rows == demo.expect


def test_intake_announces_a_moved_prefix_and_recovery_publishes_from_it(published, django_capture_on_commit_callbacks):
    """Journals never imports recovery: the batch that raises the flag sends `prefix_moved` after commit,
    once, and the publish is recovery's answer to it."""
    from kernel import events

    heard: list[dict[str, object]] = []

    def listen(**kwargs: object) -> None:
        heard.append({k: kwargs[k] for k in ("run_pk", "run_id")})

    events.prefix_moved.connect(listen, dispatch_uid="test.listen")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run = ingest("run-moved", workload_lines("run-moved", turns=6), batch_size=4)
    finally:
        events.prefix_moved.disconnect(dispatch_uid="test.listen")
    assert heard == [{"run_pk": run.pk, "run_id": "run-moved"}]
    assert published.run_ids == ["run-moved"]


def test_a_receiver_that_fails_leaves_the_flag_raised_for_the_sweep(published, django_capture_on_commit_callbacks):
    from kernel import events

    events.prefix_moved.disconnect(dispatch_uid="recovery.prefix_moved")

    def broken(**_: object) -> None:
        raise RuntimeError("the receiver crashed")

    events.prefix_moved.connect(broken, dispatch_uid="test.broken")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run = ingest("run-lost", workload_lines("run-lost"))  # the batch is stored all the same
    finally:
        events.prefix_moved.disconnect(dispatch_uid="test.broken")
        from recovery.background import prefix_moved_received

        events.prefix_moved.connect(prefix_moved_received, dispatch_uid="recovery.prefix_moved")
    assert published.run_ids == []
    flag = PendingAssessment.objects.get(run=run)
    assert flag.pending and flag.enqueued_at is None
    overdue = assessments_overdue(grace=timedelta(0), republish_after=timedelta(hours=1), limit=10)
    assert overdue == [(run.pk, "run-lost", True)]
