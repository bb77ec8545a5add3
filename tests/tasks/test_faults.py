"""Faults with real processes: Celery workers and beat as subprocesses, a private redis-server, and the
test database on PostgreSQL shared between them (committed data: ``transactional_db``).

- a worker SIGKILLed in the middle of ``assess_run`` (before or after it stored): the task runs again on
  another worker, and the store holds one assessment and one set of findings for the prefix;
- Redis restarted while tasks are queued and running: nothing lost, nothing doubled;
- two workers given the same run at once: one assessment;
- a batch committed whose task was never enqueued: the next scheduled sweep (beat) assesses it.
"""

from __future__ import annotations

from unittest import mock

import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from journals.models import PendingAssessment, Run
from ops.demo import run_effects, workload_lines
from recovery.findings.models import Finding
from recovery.models import Assessment, TurnAssessment
from recovery.tasks import assess_run
from tests.tasks.conftest import ingest
from tests.tasks.procs import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


def assessments(run_id: str) -> int:
    return Assessment.objects.filter(run__run_id=run_id).count()


@pytest.mark.parametrize("point", ["assessment.before_store", "assess_run.after_store"])
def test_a_worker_killed_mid_task_is_replaced_and_nothing_is_doubled(stack, point):
    demo = run_effects("fault-kill")
    ingest(demo.run_id, demo.lines, batch_size=6)  # three batches, one publish (coalesced)
    assert PendingAssessment.objects.get(run__run_id=demo.run_id).enqueues == 1
    doomed = stack.worker("doomed", failpoints=f"{point}=sleep:120")
    wait_for(lambda: stack.parked(point), timeout=30, what=f"the worker to park at {point}")
    survivor = stack.worker("survivor")
    doomed.kill()  # SIGKILL the worker and its pool child: no ack, no goodbye
    run = Run.objects.get(run_id=demo.run_id)
    flag = wait_for(
        lambda: PendingAssessment.objects.filter(run=run, finished_at__isnull=False).first(),
        timeout=40,
        what="the redelivered task to finish on the survivor",
    )
    assert "survivor@" in survivor.output() and "fault-kill" in survivor.output()
    assert flag.outcome == ("stored" if point == "assessment.before_store" else "unchanged")
    assert assessments(demo.run_id) == 1
    stored = Assessment.objects.get(run=run)
    assert (stored.prefix_last_seq, stored.prefix_records) == (len(demo.lines), len(demo.lines))
    decisions = dict(TurnAssessment.objects.filter(assessment=stored).values_list("turn__turn_id", "decision"))
    assert decisions == {turn: decision for turn, (decision, _) in demo.expect.items()}
    # The escalation audit, delivered twice (a redelivery), opens each fact once.
    from audits.tasks import audit_unclaimed_blocked_turns

    for _ in range(2):
        audit_unclaimed_blocked_turns.apply_async(kwargs={"older_than_seconds": 0})
    wait_for(lambda: survivor.output().count("audit unclaimed_blocked_turns") >= 2, timeout=20, what="two audits")
    assert sorted(Finding.objects.filter(run=run).values_list("kind", "subject", "seen_count")) == [
        ("blocked_turn_unclaimed", "t-charge", 2),
        ("blocked_turn_unclaimed", "t-refund", 2),
    ]


def test_redis_restarted_with_tasks_queued_and_running_loses_and_doubles_nothing(stack, redis_server):
    worker = stack.worker("slow", failpoints="assessment.before_store=sleep:2")
    run_ids = [f"fault-redis-{n}" for n in range(6)]
    for run_id in run_ids:
        ingest(run_id, workload_lines(run_id, turns=3))
    wait_for(lambda: stack.parked("assessment.before_store"), timeout=30, what="a task to be running")
    redis_server.restart(down_for=2)  # one task in the middle, five queued
    wait_for(
        lambda: all(assessments(r) for r in run_ids),
        timeout=90,
        interval=0.5,
        what="every run to be assessed after the restart",
    )
    assert [assessments(r) for r in run_ids] == [1] * 6
    assert not PendingAssessment.objects.filter(pending=True).exists()
    assert all(run.assessed_seq == run.last_seq for run in Run.objects.filter(run_id__in=run_ids))
    assert "Connection to broker lost" in worker.output() or "Cannot connect" in worker.output()


def test_two_workers_given_the_same_run_at_once_store_one_assessment(stack):
    first = stack.worker("first", failpoints="assessment.before_store=sleep:3")
    second = stack.worker("second", failpoints="assessment.before_store=sleep:3")
    with mock.patch("recovery.background.assessment_enqueue"):  # exactly the two messages below
        run = ingest("fault-twins", workload_lines("fault-twins", turns=4))
    for _ in range(2):  # the same message twice, as a duplicate delivery would
        assess_run.apply_async(args=["fault-twins"])
    def finished() -> list[str]:
        return [
            line for w in (first, second) for line in w.output().splitlines()
            if "recovery.tasks.assess_run[" in line and "succeeded" in line
        ]

    wait_for(lambda: len(finished()) >= 2, timeout=30, what="both tasks to finish")
    # The first to lower the flag holds the run's lease; the duplicate finds it live (or the work done) and
    # does nothing: it never reaches the engine.
    outcomes = sorted(line.split("succeeded", 1)[1].split(": ", 1)[1].split('"')[0] for line in finished())
    assert outcomes in (["'in_flight'", "'stored'"], ["'stored'", "'unchanged'"]), outcomes
    assert len(stack.parked("assessment.before_store")) == 1
    assert assessments("fault-twins") == 1
    assert PendingAssessment.objects.get(run=run).outcome == "stored"
    assert TurnAssessment.objects.filter(assessment__run=run).count() == 4


def test_a_batch_whose_task_was_never_enqueued_is_assessed_by_the_scheduled_sweep(stack):
    schedule, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name="audit: assessment sweep",
        defaults={"task": "audits.tasks.audit_assessment_sweep", "interval": schedule, "kwargs": '{"grace_seconds": 0}',
                  "enabled": True},
    )
    stack.worker("sweeper")
    with mock.patch("recovery.background.assessment_enqueue") as enqueue:  # the process "died" after commit
        run = ingest("fault-unsent", workload_lines("fault-unsent", turns=3), batch_size=5)
    assert enqueue.called and PendingAssessment.objects.get(run=run).enqueued_at is None
    stack.beat()
    wait_for(lambda: assessments("fault-unsent"), timeout=40, what="the sweep to get the run assessed")
    assert assessments("fault-unsent") == 1
    missed = Finding.objects.get(run=run, kind="assessment_missed")
    assert missed.evidence["cause"] == "committed but never enqueued"
