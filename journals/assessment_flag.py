"""Every write of the pending-assessment flag (journals.models.PendingAssessment): raised by intake, lowered and stamped
by the assessment task through the functions here, so the table has one writer.

When a batch raises the flag, its transaction announces ``prefix_moved`` once it commits
(kernel/events.py); recovery's receiver publishes ``assess_run`` (recovery/background.py has the whole
protocol). A lost announcement leaves the flag raised and the sweep republishes it: nothing is owed that
the database does not say.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from journals.models import PendingAssessment, Run
from kernel import events
from kernel.events import emit

# Raise the flag in one statement, whatever its state: insert it raised, or raise it if it was lowered.
# A row comes back only when this statement raised it. No savepoint and no read first: on PostgreSQL,
# ON CONFLICT locks the existing row before it evaluates the WHERE, so a flag that was already raised
# stays locked until the caller commits as well (the module doc's step 1); SQLite serialises writers.
_RAISE_SQL = (
    "INSERT INTO {table} (run_id, pending, requested_at, requested_seq, enqueues, outcome, lease_holder)"
    " VALUES (%(flag_run)s, TRUE, %(flag_at)s, %(flag_seq)s, 0, '', '')"
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
    """After the flag's upsert: the call that raised it announces ``prefix_moved`` once its transaction
    commits (recovery then publishes ``assess_run``)."""
    if raised:
        run_pk, run_id = run.pk, run.run_id
        transaction.on_commit(lambda: emit(events.prefix_moved, sender=Run, run_pk=run_pk, run_id=run_id))
    return raised


def assessment_request(*, run: Run) -> bool:
    """Raise the run's pending flag; True when this call raised it (it then announces ``prefix_moved`` after commit).
    Inside the caller's transaction (ingest's), the flag's row stays locked until that commits."""
    sql, params = assessment_request_statement(run=run)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        raised = cursor.fetchone() is not None
    return assessment_requested(run=run, raised=raised)


def assessment_flag_published(*, run_pk: int) -> None:
    """A message for the raised flag reached the broker: the sweep measures a lost message from here."""
    PendingAssessment.objects.filter(run_id=run_pk).update(enqueued_at=timezone.now(), enqueues=F("enqueues") + 1)


def assessment_flag_lower(*, run_pk: int, holder: str, expires_at: datetime) -> bool:
    """The task lowers the flag before it reads the prefix, and takes its lease (until ``expires_at``) in
    the same UPDATE. That UPDATE waits for a batch that holds the row, so every batch committed before it is
    in what the task reads, and every later one raises it again. True when the flag was raised."""
    return bool(
        PendingAssessment.objects.filter(run_id=run_pk, pending=True).update(
            pending=False, started_at=timezone.now(), lease_expires_at=expires_at, lease_holder=holder
        )
    )


def assessment_flag_take(*, run_pk: int, holder: str, expires_at: datetime) -> None:
    """Take the lease of a lowered flag: the broker redelivered the message of a task that died holding it,
    or the run is behind its prefix with nobody on it."""
    PendingAssessment.objects.filter(run_id=run_pk).update(
        started_at=timezone.now(), lease_expires_at=expires_at, lease_holder=holder
    )


def assessment_flag_renew(*, run_pk: int, holder: str, expires_at: datetime) -> bool:
    """The running task moves its lease's deadline; False when it no longer holds the lease (a newer task
    lowered the flag again and took it)."""
    return bool(
        PendingAssessment.objects.filter(run_id=run_pk, lease_holder=holder, pending=False).update(
            lease_expires_at=expires_at
        )
    )


def assessment_flag(*, run_pk: int) -> PendingAssessment | None:
    return PendingAssessment.objects.filter(run_id=run_pk).first()


def assessment_flag_finished(*, run_pk: int, outcome: str, holder: str = "") -> None:
    """What the latest task run did (``stored``, ``unchanged``, ``superseded``, ``missing``); the task
    gives its lease back if it still holds it."""
    done: dict[str, Any] = {"finished_at": timezone.now(), "outcome": outcome}
    if holder:
        # One statement, so one commit: the outcome and the lease given back land together.
        ours = Q(lease_holder=holder)
        done["lease_expires_at"] = Case(When(ours, then=Value(None)), default=F("lease_expires_at"))
        done["lease_holder"] = Case(When(ours, then=Value("")), default=F("lease_holder"))
    PendingAssessment.objects.filter(run_id=run_pk).update(**done)


def assessment_flag_failed(*, run_pk: int, holder: str, retry_at: datetime) -> None:
    """The task failed for good (an error that is not the database's): it gives its lease back, and the run
    is asked for again at ``retry_at`` (its hard time limit), not at once, so that a run the engine cannot
    assess is not retried in a loop."""
    PendingAssessment.objects.filter(run_id=run_pk, lease_holder=holder).update(
        lease_expires_at=retry_at, lease_holder=""
    )


def assessments_lease_expired(*, now: datetime, limit: int) -> list[tuple[int, bool]]:
    """(run pk, failed) of lowered flags whose lease ran out before a task finished: the task is gone (its
    worker was killed, or the message with it), whatever the broker still holds; or (``failed``) it failed
    and gave its lease back until its time limit."""
    rows = (
        PendingAssessment.objects.filter(pending=False, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("run_id", "lease_holder")[:limit]
    )
    return [(run_pk, not holder) for run_pk, holder in rows]


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
