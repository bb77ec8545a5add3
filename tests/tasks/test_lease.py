"""The assessment's lease: a task that lowered the run's flag holds it until a deadline, renews it while it
runs, and the sweep asks again once it ran out, whatever the broker says. Duplicate messages are harmless."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from audits.checks import audit_assessment_sweep
from journals.assessment_flag import assessment_flag_finished, assessment_flag_lower, assessment_flag_renew
from journals.models import PendingAssessment, Run
from ops.demo import workload_lines
from recovery.background import LeaseKeeper, assessment_run
from recovery.findings.models import Finding
from recovery.models import Assessment
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db
NOW = timedelta(0)


def published_and_lowered(published, capture, run_id: str, *, holder: str, expires_in: timedelta) -> Run:
    """A run whose batch was published and whose task lowered the flag and holds its lease, then (for a lease
    in the past) died without finishing: its worker was killed, or Redis lost its message."""
    with capture(execute=True):
        run = ingest(run_id, workload_lines(run_id))
    assert published.run_ids == [run_id]
    assert assessment_flag_lower(run_pk=run.pk, holder=holder, expires_at=timezone.now() + expires_in)
    return run


def sweep() -> dict:
    return audit_assessment_sweep(grace=NOW, republish_after=timedelta(hours=1), limit=10).as_dict()


def test_a_flag_whose_lease_ran_out_is_raised_and_published_again(published, django_capture_on_commit_callbacks):
    run = published_and_lowered(
        published, django_capture_on_commit_callbacks, "run-dead", holder="task-1", expires_in=-timedelta(seconds=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        report = sweep()
    assert report["lease_expired"] == 1 and report["checked"] == 1
    assert published.run_ids == ["run-dead", "run-dead"]
    assert PendingAssessment.objects.get(run=run).pending
    assert not Finding.objects.exists()  # a dead worker is not a lost enqueue
    # The republished message (another id) assesses it; the next pass finds nothing owed.
    assert assessment_run(run_id="run-dead", task_id="task-2") == "stored"
    flag = PendingAssessment.objects.get(run=run)
    assert (flag.pending, flag.lease_expires_at, flag.lease_holder, flag.outcome) == (False, None, "", "stored")
    assert sweep()["checked"] == 0
    assert Run.objects.get(pk=run.pk).assessed_seq == run.last_seq


def test_a_live_lease_is_left_alone(published, django_capture_on_commit_callbacks):
    run = published_and_lowered(
        published, django_capture_on_commit_callbacks, "run-live", holder="task-1", expires_in=timedelta(minutes=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        report = sweep()
    assert report["checked"] == 0 and report["in_flight"] == 1
    assert published.run_ids == ["run-live"]
    assert not PendingAssessment.objects.get(run=run).pending


def test_a_message_delivered_twice_assesses_once(published, django_capture_on_commit_callbacks):
    run = published_and_lowered(
        published, django_capture_on_commit_callbacks, "run-twice", holder="task-1", expires_in=timedelta(minutes=1)
    )
    # A duplicate (the sweep's republish of a message that was only late) while task-1 holds a live lease.
    assert assessment_run(run_id="run-twice", task_id="task-2") == "in_flight"
    assert not Assessment.objects.filter(run=run).exists()
    assert PendingAssessment.objects.get(run=run).lease_holder == "task-1"
    # The broker redelivers task-1's own message after its worker died: it takes its lease over at once.
    assert assessment_run(run_id="run-twice", task_id="task-1") == "stored"
    # Every later copy finds the work done and does nothing: no assessment, no flag write.
    before = PendingAssessment.objects.get(run=run)
    assert assessment_run(run_id="run-twice", task_id="task-1") == "unchanged"
    assert assessment_run(run_id="run-twice", task_id="task-3") == "unchanged"
    assert Assessment.objects.filter(run=run).count() == 1
    after = PendingAssessment.objects.get(run=run)
    assert (after.started_at, after.finished_at, after.outcome) == (before.started_at, before.finished_at, "stored")


def test_a_batch_after_the_lowering_is_owned_by_its_own_message(published, django_capture_on_commit_callbacks):
    lines = workload_lines("run-moving", turns=4)
    with django_capture_on_commit_callbacks(execute=True):
        run = ingest("run-moving", lines[:6])
    assert assessment_flag_lower(run_pk=run.pk, holder="task-1", expires_at=timezone.now() + timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        ingest("run-moving", lines[6:])  # raises the flag again and publishes
    assert published.run_ids == ["run-moving", "run-moving"]
    assert assessment_run(run_id="run-moving", task_id="task-2") == "stored"
    assert Run.objects.get(pk=run.pk).assessed_seq == len(lines)
    # task-1 (late) finds the flag lowered by task-2, which finished: nothing is owed.
    assert assessment_run(run_id="run-moving", task_id="task-1") == "unchanged"


def test_renewal_moves_the_deadline_only_for_the_holder_and_never_past_the_hard_limit(published):
    run = ingest("run-renew", workload_lines("run-renew"))
    soon = timezone.now() + timedelta(seconds=5)
    assert assessment_flag_lower(run_pk=run.pk, holder="task-1", expires_at=soon)
    later = soon + timedelta(seconds=30)
    assert not assessment_flag_renew(run_pk=run.pk, holder="task-2", expires_at=later)
    assert PendingAssessment.objects.get(run=run).lease_expires_at == soon
    assert assessment_flag_renew(run_pk=run.pk, holder="task-1", expires_at=later)
    assert PendingAssessment.objects.get(run=run).lease_expires_at == later
    with override_settings(LOOPX_ASSESS_LEASE_SECONDS=30, LOOPX_ASSESS_TIME_LIMIT=10):
        keeper = LeaseKeeper(run_pk=run.pk, holder="task-1")
        assert keeper.expires_at() == keeper.deadline  # capped: the hard limit comes first
    with override_settings(LOOPX_ASSESS_LEASE_SECONDS=30, LOOPX_ASSESS_TIME_LIMIT=300):
        keeper = LeaseKeeper(run_pk=run.pk, holder="task-1")
        assert keeper.expires_at() < keeper.deadline - timedelta(seconds=200)


def test_finishing_records_the_outcome_and_gives_back_only_its_own_lease(published):
    run = ingest("run-finish", workload_lines("run-finish"))
    soon = timezone.now() + timedelta(seconds=30)
    assert assessment_flag_lower(run_pk=run.pk, holder="task-new", expires_at=soon)
    # A task that lost its lease to a newer one finishes: the outcome is its, the lease stays the newer one's.
    assessment_flag_finished(run_pk=run.pk, outcome="superseded", holder="task-old")
    flag = PendingAssessment.objects.get(run=run)
    assert (flag.outcome, flag.lease_holder, flag.lease_expires_at) == ("superseded", "task-new", soon)
    assert flag.finished_at is not None
    assessment_flag_finished(run_pk=run.pk, outcome="stored", holder="task-new")
    flag = PendingAssessment.objects.get(run=run)
    assert (flag.outcome, flag.lease_holder, flag.lease_expires_at) == ("stored", "", None)


@pytest.mark.django_db(transaction=True)
@override_settings(LOOPX_ASSESS_LEASE_SECONDS=1, LOOPX_ASSESS_TIME_LIMIT=60)
def test_a_running_task_renews_its_lease_on_its_own_thread(published):
    run = ingest("run-keeper", workload_lines("run-keeper"))
    keeper = LeaseKeeper(run_pk=run.pk, holder="task-1")
    first = keeper.expires_at()
    assert assessment_flag_lower(run_pk=run.pk, holder="task-1", expires_at=first)
    with keeper:
        time.sleep(1.5)  # the engine's time: more than a lease, so only renewals keep it alive
        renewed = PendingAssessment.objects.get(run=run).lease_expires_at
        assert renewed is not None and renewed > first and renewed > timezone.now()
    time.sleep(0.5)
    assert PendingAssessment.objects.get(run=run).lease_expires_at == renewed  # stopped with the task


def test_a_task_that_fails_gives_its_lease_back_until_its_time_limit(
    published, django_capture_on_commit_callbacks, monkeypatch
):
    from recovery import services as recovery_services

    with django_capture_on_commit_callbacks(execute=True):
        run = ingest("run-poison", workload_lines("run-poison"))

    def engine_bug(*args, **kwargs):
        raise ValueError("the engine cannot read this run")

    monkeypatch.setattr(recovery_services, "assess_kept", engine_bug)
    with pytest.raises(ValueError):
        assessment_run(run_id="run-poison", task_id="task-1")
    flag = PendingAssessment.objects.get(run=run)
    assert flag.lease_holder == "" and flag.lease_expires_at > timezone.now() + timedelta(minutes=4)
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep()["checked"] == 0  # not in a loop: the run waits for the task's time limit
    PendingAssessment.objects.filter(run=run).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        report = sweep()
    assert report["assessment_failed"] == 1 and published.run_ids == ["run-poison", "run-poison"]
    missed = Finding.objects.get(kind="assessment_missed", run=run)
    assert missed.evidence["cause"].startswith("the assessment failed")
