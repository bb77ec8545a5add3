"""Two Celery worker processes at once (real subprocesses on a private Redis, the test database on
PostgreSQL shared between them; SQLite takes one writer at a time, so these run on PostgreSQL only):

- two different runs are assessed at the same time, each by its own worker, and both finish: no lock wider
  than a run's holds one worker back while the other assesses;
- two assessments of the same run are serialised: the older one, parked before it stores while a newer batch
  is assessed and stored by the other worker, stores nothing (it finds the prefix moved under the run's row
  lock), so the run keeps one assessment, of its newest prefix.
"""

from __future__ import annotations

import pytest

from journals.models import PendingAssessment, Run
from kernel.failpoints import arm_file
from ops.demo import workload_lines
from recovery.models import Assessment, TurnAssessment
from tests.tasks.conftest import ingest
from tests.tasks.procs import Proc, Stack, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

POINT = "assessment.before_store"
# How long a worker stays parked at the point: the other worker has that long to reach it too (or, for one
# run, to store the newer prefix). Ample on a loaded machine; the test waits for the workers, never for it.
PARK_SECONDS = 20
# The stack's workers give an unacknowledged message back after 4 s (its fault tests want a fast redelivery):
# here a parked task must keep its message, or the other worker would run it a second time.
KEEP_MESSAGES = {"CELERY_VISIBILITY_TIMEOUT": "300"}


def outcomes(worker: Proc) -> list[str]:
    """The outcomes of the assess_run tasks the worker finished, in order (from its log)."""
    return [
        line.split("succeeded", 1)[1].split(": ", 1)[1].split('"')[0].strip("'")
        for line in worker.output().splitlines()
        if "recovery.tasks.assess_run[" in line and "succeeded" in line
    ]


def assessed(run_id: str) -> bool:
    run = Run.objects.get(run_id=run_id)
    return run.assessed_seq == run.last_seq and not PendingAssessment.objects.filter(run=run, pending=True).exists()


def test_two_workers_assess_two_runs_at_the_same_time(stack: Stack) -> None:
    parking = f"{POINT}=sleep:{PARK_SECONDS}"
    workers = [stack.worker(name, failpoints=parking, env=KEEP_MESSAGES) for name in ("left", "right")]
    run_ids = ["parallel-a", "parallel-b"]
    for run_id in run_ids:
        ingest(run_id, workload_lines(run_id, turns=5))  # each batch publishes its run's assess_run
    parked = wait_for(lambda: len(stack.parked(POINT)) >= 2 and stack.parked(POINT), timeout=60, what="both parked")
    # Both workers are between the engine and the store at this instant, and neither has stored: the two
    # assessments overlap.
    stored_while_parked = Assessment.objects.filter(run__run_id__in=run_ids).count()
    assert stored_while_parked == 0
    assert len(set(parked)) == 2  # two processes, one per run
    wait_for(lambda: all(assessed(r) for r in run_ids), timeout=90, interval=0.5, what="both runs to be assessed")
    wait_for(lambda: all(outcomes(w) for w in workers), timeout=30, what="both workers to report")
    assert [outcomes(w) for w in workers] == [["stored"], ["stored"]]  # each worker assessed one run
    for run_id in run_ids:
        assert Assessment.objects.filter(run__run_id=run_id).count() == 1
        assert TurnAssessment.objects.filter(assessment__run__run_id=run_id).count() == 5


def test_two_assessments_of_one_run_are_serialised(stack: Stack) -> None:
    run_id = "serial-run"
    # The first worker to reach the point for this run parks there; the other goes on (an armed failpoint is
    # taken once).
    arm = stack.tmp / "arm"
    arm.mkdir()
    (arm / arm_file(POINT, run_id)).write_text(f"sleep:{PARK_SECONDS}")
    extra = {"LOOPX_FAILPOINTS_ARM_DIR": str(arm), **KEEP_MESSAGES}
    workers = [stack.worker(name, env=extra) for name in ("one", "two")]
    lines = workload_lines(run_id, turns=6)
    first = ingest(run_id, lines[:10])
    wait_for(lambda: stack.parked(POINT), timeout=60, what="the first assessment to park before it stores")
    ingest(run_id, lines[10:])  # the parked task lowered the flag: this batch raises it and publishes again
    run = Run.objects.get(pk=first.pk)
    # The other worker assesses the newer prefix and stores it while the older assessment is still parked.
    newest = wait_for(
        lambda: Assessment.objects.filter(run=run).first(), timeout=60, what="the newer prefix to be stored"
    )
    assert newest.prefix_last_seq == len(lines) and newest.prefix_records == len(lines)
    assert sorted(outcomes(w) for w in workers) == [[], ["stored"]]  # the older one has not finished
    wait_for(lambda: all(outcomes(w) for w in workers), timeout=60, what="the parked assessment to finish")
    # It woke, compared the prefix under the run's row lock, found it moved, and stored nothing.
    assert sorted(o for w in workers for o in outcomes(w)) == ["stored", "superseded"]
    assert len(stack.parked(POINT)) == 1
    assert list(Assessment.objects.filter(run=run).values_list("pk", flat=True)) == [newest.pk]
    assert TurnAssessment.objects.filter(assessment__run=run).count() == 6
    assert assessed(run_id)
