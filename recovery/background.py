"""Background assessments: one pending assessment per run, enqueued after commit, stored only for the
newest prefix.

The protocol (docs/celery.md has the picture). The flag's row is also the lock that orders ingest and
the task, so neither takes the run's lock for it:

1. Ingest stores a batch and, in the same transaction, calls ``assessment_request``
   (journals/assessment_flag.py): it locks the run's ``PendingAssessment`` row and raises ``pending`` if
   it was lowered. Only the batch that raised it announces ``prefix_moved`` on commit, and
   ``prefix_moved_received`` here publishes ``assess_run``; later batches find it raised and add nothing,
   so many batches cost one task. Either way the row stays locked until the batch commits.
2. ``assessment_run`` (the task's body) lowers the flag *before* it reads the prefix, with one UPDATE
   that waits for that row lock. Every batch committed before the lowering is in what it reads; every
   batch after it raises the flag again and publishes a new task. Nothing is lost, and ingest never
   waits for an engine that is running.
3. It stores the assessment only if the prefix it read is still the run's newest when it writes
   (``assessment_refresh(newest_only=True)``, else PrefixSuperseded); the store's unique identity
   (prefix, evidence, engine and projection version) makes a redelivered or concurrent run of the same
   task find the row already there.
4. A publish that never happened (a crash between commit and publish, a broker that was down) leaves the
   flag raised with ``enqueued_at`` older than ``requested_at``: the scheduled sweep republishes it.
"""

from __future__ import annotations

import logging
from typing import Any

from journals.assessment_flag import assessment_flag_finished, assessment_flag_lower, assessment_flag_published
from journals.models import Run
from kernel.failpoints import failpoint
from recovery.models import Assessment
from recovery.services import PrefixSuperseded, assessment_refresh

logger = logging.getLogger(__name__)

# A publish that cannot reach the broker gives up quickly: the batch is committed, the flag stays raised,
# and the sweep publishes later. Blocking an ingest answer on a broker outage would help no one.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def prefix_moved_received(*, run_pk: int, run_id: str, **_: Any) -> None:
    """The receiver of ``prefix_moved`` (connected in recovery/apps.py): publish the owed assessment."""
    assessment_enqueue(run_pk=run_pk, run_id=run_id)


def assessment_enqueue(*, run_pk: int, run_id: str) -> bool:
    """Publish ``assess_run`` for a run whose flag is raised. Never raises: on failure the flag stays
    raised and the sweep tries again."""
    from recovery.tasks import assess_run  # tasks import this module

    try:
        assess_run.apply_async(args=[run_id], retry=True, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception:  # any broker or serialisation failure: the database already holds the truth
        logger.warning("could not publish assess_run for run pk %s; the sweep will retry", run_pk, exc_info=True)
        return False
    assessment_flag_published(run_pk=run_pk)
    return True


def assessment_run(*, run_id: str) -> str:
    """Assess the run's committed prefix (the body of ``assess_run``). Returns the outcome:
    ``stored`` (a new assessment), ``unchanged`` (one with this identity existed), ``superseded`` (a newer
    batch arrived meanwhile; its own task assesses it) or ``missing`` (no such run)."""
    run = Run.objects.only("pk", "run_id").filter(run_id=run_id).first()
    if run is None:
        return "missing"
    # Lowered before the prefix is read; the UPDATE waits for a batch that holds the row (module doc, 2).
    assessment_flag_lower(run_pk=run.pk)
    before = Assessment.objects.filter(run_id=run.pk).order_by("-id").values_list("id", flat=True).first() or 0
    failpoint("assess_run.before_assess", key=run_id)
    try:
        stored = assessment_refresh(run=run, newest_only=True)
    except PrefixSuperseded:
        outcome = "superseded"
    else:
        outcome = "stored" if stored.pk > before else "unchanged"
    failpoint("assess_run.after_store", key=run_id)
    assessment_flag_finished(run_pk=run.pk, outcome=outcome)
    return outcome
