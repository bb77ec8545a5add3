"""Celery tasks of the recovery app: thin (ids in, re-read, call a service) and idempotent.

Every task is acknowledged late and rejected (requeued) when its worker process dies, so a crash in the
middle runs it again; the services make a second run find its work already done (recovery/background.py).
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from recovery.background import assessment_run


@shared_task(
    name="recovery.tasks.assess_run",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=max(1, settings.LOOPX_ASSESS_TIME_LIMIT - 30),
    time_limit=settings.LOOPX_ASSESS_TIME_LIMIT,
    # A database that is briefly unreachable or locked (SQLite under a writer) is worth another try; any
    # other error leaves the run behind its prefix, which the scheduled sweep notices.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=5,
    ignore_result=True,
)
def assess_run(run_id: str) -> str:
    """Assess a run's committed prefix (coalesced: one pending assessment per run)."""
    return assessment_run(run_id=run_id)
