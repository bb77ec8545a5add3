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
   The same UPDATE gives the task a lease on the flag (``LeaseKeeper``), renewed while it runs: a
   worker that dies stops renewing, and the sweep asks again once the lease has run out.
3. It stores the assessment only if the prefix it read is still the run's newest when it writes
   (``assessment_refresh_stored(newest_only=True)``, else PrefixSuperseded); the store's unique identity
   (prefix, evidence, engine and projection version) makes a redelivered or concurrent run of the same
   task find the row already there.
4. A publish that never happened (a crash between commit and publish, a broker that was down) leaves the
   flag raised with ``enqueued_at`` older than ``requested_at``: the scheduled sweep republishes it.
5. A message that finds the flag lowered does nothing when a live lease or a newer message owns the run,
   or when the run is already assessed through its last record: duplicates are cheap.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.utils import timezone

from journals.assessment_flag import (
    assessment_flag,
    assessment_flag_failed,
    assessment_flag_finished,
    assessment_flag_lower,
    assessment_flag_published,
    assessment_flag_renew,
    assessment_flag_take,
)
from journals.models import Run
from kernel.failpoints import failpoint
from recovery.publish import task_publish
from recovery.services import PrefixSuperseded, assessment_refresh_stored

logger = logging.getLogger(__name__)

# A publish that cannot reach the broker gives up quickly: the batch is committed, the flag stays raised,
# and the sweep publishes later. Blocking an ingest answer on a broker outage would help no one.


def prefix_moved_received(*, run_pk: int, run_id: str, **_: Any) -> None:
    """The receiver of ``prefix_moved`` (connected in recovery/apps.py): publish the owed assessment."""
    assessment_enqueue(run_pk=run_pk, run_id=run_id)


def assessment_enqueue(*, run_pk: int, run_id: str) -> bool:
    """Publish ``assess_run`` for a run whose flag is raised. Never raises: on failure the flag stays
    raised and the sweep tries again."""
    try:
        task_publish("recovery.tasks.assess_run", run_id)
    except Exception:  # any broker or serialisation failure: the database already holds the truth
        logger.warning("could not publish assess_run for run pk %s; the sweep will retry", run_pk, exc_info=True)
        return False
    assessment_flag_published(run_pk=run_pk)
    return True


class LeaseKeeper:
    """The running task's lease on its flag: ``LOOPX_ASSESS_LEASE_SECONDS`` long, renewed every third of
    that on a thread of its own (the engine holds the task's thread) while the task runs, and never past
    the task's hard time limit, after which Celery has killed it anyway. A worker that dies stops renewing,
    so its lease runs out within one lease and the sweep asks again, whatever the broker still holds."""

    def __init__(self, *, run_pk: int, holder: str) -> None:
        self.run_pk = run_pk
        self.holder = holder
        self.length = timedelta(seconds=min(settings.LOOPX_ASSESS_LEASE_SECONDS, settings.LOOPX_ASSESS_TIME_LIMIT))
        self.deadline = timezone.now() + timedelta(seconds=settings.LOOPX_ASSESS_TIME_LIMIT)
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def expires_at(self) -> datetime:
        return min(timezone.now() + self.length, self.deadline)

    def __enter__(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._renew, name=f"assess-lease-{self.run_pk}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _renew(self) -> None:
        every = self.length.total_seconds() / 3
        try:
            # A task shorter than a third of its lease never touches the database from here.
            while not self._done.wait(every):
                try:
                    if not assessment_flag_renew(run_pk=self.run_pk, holder=self.holder, expires_at=self.expires_at()):
                        return  # a newer task took the flag: its lease is its own
                except DatabaseError:
                    # The database is away: try again next time on a fresh connection. If it stays away the
                    # lease runs out and the sweep asks again, which is the point of a lease.
                    logger.warning("could not renew the assessment lease of run pk %s", self.run_pk, exc_info=True)
                    connections.close_all()
        finally:
            connections.close_all()  # this thread's own connections


def assessment_run(*, run_id: str, task_id: str | None = None) -> str:
    """Assess the run's committed prefix (the body of ``assess_run``). Returns the outcome:
    ``stored`` (a new assessment), ``unchanged`` (one with this identity existed, or the run was already
    assessed through its last record), ``superseded`` (a newer batch arrived meanwhile; its own task
    assesses it), ``in_flight`` (another live task holds the run's lease: this message is a duplicate)
    or ``missing`` (no such run).

    ``task_id`` names the lease's holder: the broker's redelivery of a message whose worker died carries
    the same id and takes the dead task's lease over at once instead of waiting for it to run out."""
    run = Run.objects.only("pk", "run_id", "last_seq", "assessed_seq").filter(run_id=run_id).first()
    if run is None:
        return "missing"
    holder = task_id or f"local-{uuid.uuid4().hex}"
    keeper = LeaseKeeper(run_pk=run.pk, holder=holder)
    # Lowered before the prefix is read; the UPDATE waits for a batch that holds the row (module doc, 2).
    if not assessment_flag_lower(run_pk=run.pk, holder=holder, expires_at=keeper.expires_at()):
        skip = _nothing_owed(run, holder)
        if skip is not None:
            return skip
        assessment_flag_take(run_pk=run.pk, holder=holder, expires_at=keeper.expires_at())
    with keeper:
        failpoint("assess_run.before_assess", key=run_id)
        try:
            _, stored = assessment_refresh_stored(run=run, newest_only=True)
        except PrefixSuperseded:
            outcome = "superseded"
        except DatabaseError:
            raise  # retried by the task under the same id, which takes the lease over
        except Exception:
            assessment_flag_failed(run_pk=run.pk, holder=holder, retry_at=keeper.deadline)
            raise
        else:
            outcome = "stored" if stored else "unchanged"
        failpoint("assess_run.after_store", key=run_id)
    assessment_flag_finished(run_pk=run.pk, outcome=outcome, holder=holder)
    return outcome


def _nothing_owed(run: Run, holder: str) -> str | None:
    """Why a message whose flag was not raised has nothing to do, or None when it should assess: its work
    is someone else's (a live lease, or a raised flag with a message of its own), or already done."""
    flag = assessment_flag(run_pk=run.pk)
    if flag is None or flag.lease_holder == holder:
        return None  # no flag (a run from before the queue), or our own redelivery after our worker died
    if flag.pending or (flag.lease_expires_at is not None and flag.lease_expires_at > timezone.now()):
        return "in_flight"
    if run.assessed_seq is not None and run.assessed_seq >= run.last_seq:
        return "unchanged"
    return None
