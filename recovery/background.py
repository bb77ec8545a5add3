"""Background assessments: one pending assessment per run, enqueued after commit, stored only for the
newest prefix.

The protocol (docs/celery.md has the picture). The flag's row is also the lock that orders ingest and
the task, so neither takes the run's lock for it:

1. Ingest stores a batch and, in the same transaction, calls ``assessment_request``: it locks the run's
   ``PendingAssessment`` row and raises ``pending`` if it was lowered. Only the batch that raised it
   publishes ``assess_run`` (``transaction.on_commit``); later batches find it raised and add nothing, so
   many batches cost one task. Either way the row stays locked until the batch commits.
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
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from journals.models import Run
from kernel.failpoints import failpoint
from recovery.models import Assessment
from recovery.pending import PendingAssessment
from recovery.services import PrefixSuperseded, assessment_refresh

logger = logging.getLogger(__name__)

# A publish that cannot reach the broker gives up quickly: the batch is committed, the flag stays raised,
# and the sweep publishes later. Blocking an ingest answer on a broker outage would help no one.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


# Raise the flag in one statement, whatever its state: insert it raised, or raise it if it was lowered.
# A row comes back only when this statement raised it. No savepoint and no read first: on PostgreSQL,
# ON CONFLICT locks the existing row before it evaluates the WHERE, so a flag that was already raised
# stays locked until the caller commits as well (the module doc's step 1); SQLite serialises writers.
_RAISE_SQL = (
    "INSERT INTO {table} (run_id, pending, requested_at, requested_seq, enqueues, outcome)"
    " VALUES (%(flag_run)s, TRUE, %(flag_at)s, %(flag_seq)s, 0, '')"
    " ON CONFLICT (run_id) DO UPDATE SET pending = TRUE, requested_at = excluded.requested_at,"
    " requested_seq = excluded.requested_seq WHERE NOT {table}.pending"
    " RETURNING run_id"
)


def assessment_request_statement(*, run: Run) -> tuple[str, dict[str, Any]]:
    """The flag's upsert (SQL and named parameters) for a caller that sends it inside a statement of its
    own (ingest's projection statement on PostgreSQL); it returns a row only when it raised the flag. The
    caller passes that to ``assessment_requested`` in the same transaction."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    table = connection.ops.quote_name(PendingAssessment._meta.db_table)
    return _RAISE_SQL.format(table=table), {"flag_run": run.pk, "flag_at": now, "flag_seq": run.last_seq}


def assessment_requested(*, run: Run, raised: bool) -> bool:
    """After the flag's upsert: the call that raised it publishes ``assess_run`` once its transaction commits."""
    if raised:
        run_pk, run_id = run.pk, run.run_id
        transaction.on_commit(lambda: assessment_enqueue(run_pk=run_pk, run_id=run_id))
    return raised


def assessment_request(*, run: Run) -> bool:
    """Raise the run's pending flag; True when this call raised it (it then publishes after commit).
    Inside the caller's transaction (ingest's), the flag's row stays locked until that commits."""
    sql, params = assessment_request_statement(run=run)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        raised = cursor.fetchone() is not None
    return assessment_requested(run=run, raised=raised)


def assessment_enqueue(*, run_pk: int, run_id: str) -> bool:
    """Publish ``assess_run`` for a run whose flag is raised. Never raises: on failure the flag stays
    raised and the sweep tries again."""
    from recovery.tasks import assess_run  # tasks import this module

    try:
        assess_run.apply_async(args=[run_id], retry=True, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception:  # any broker or serialisation failure: the database already holds the truth
        logger.warning("could not publish assess_run for run pk %s; the sweep will retry", run_pk, exc_info=True)
        return False
    PendingAssessment.objects.filter(run_id=run_pk).update(enqueued_at=timezone.now(), enqueues=F("enqueues") + 1)
    return True


def assessment_run(*, run_id: str) -> str:
    """Assess the run's committed prefix (the body of ``assess_run``). Returns the outcome:
    ``stored`` (a new assessment), ``unchanged`` (one with this identity existed), ``superseded`` (a newer
    batch arrived meanwhile; its own task assesses it) or ``missing`` (no such run)."""
    run = Run.objects.only("pk", "run_id").filter(run_id=run_id).first()
    if run is None:
        return "missing"
    # Lowered before the prefix is read; the UPDATE waits for a batch that holds the row (module doc, 2).
    PendingAssessment.objects.filter(run_id=run.pk, pending=True).update(pending=False, started_at=timezone.now())
    before = Assessment.objects.filter(run_id=run.pk).order_by("-id").values_list("id", flat=True).first() or 0
    failpoint("assess_run.before_assess")
    try:
        stored = assessment_refresh(run=run, newest_only=True)
    except PrefixSuperseded:
        outcome = "superseded"
    else:
        outcome = "stored" if stored.pk > before else "unchanged"
    failpoint("assess_run.after_store")
    PendingAssessment.objects.filter(run_id=run.pk).update(finished_at=timezone.now(), outcome=outcome)
    return outcome


def assessments_overdue(*, grace: timedelta, republish_after: timedelta, limit: int) -> list[tuple[int, str, bool]]:
    """(run pk, run id, never enqueued) for raised flags the sweep should publish again: raised longer
    than ``grace`` ago and never published since (a lost enqueue), or published longer than
    ``republish_after`` ago and still raised (a message the broker lost)."""
    now = timezone.now()
    rows = (
        PendingAssessment.objects.filter(pending=True, requested_at__lt=now - grace)
        .select_related("run")
        .order_by("requested_at")[:limit]
    )
    due: list[tuple[int, str, bool]] = []
    for row in rows:
        enqueued, requested = row.enqueued_at, row.requested_at
        never = enqueued is None or requested is None or enqueued < requested
        if never or (enqueued is not None and enqueued < now - republish_after):
            due.append((row.run_id, row.run.run_id, never))
    return due
