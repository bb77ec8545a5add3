"""The scheduled audits as Celery tasks (beat runs them from the schedules of migration 0005, editable in
the admin). Thin: thresholds come from settings unless the schedule's kwargs override them; the work is
in audits/checks.py. Each pass is bounded and idempotent, acknowledged late and requeued if its worker
dies, so a pass interrupted half-way is simply done again.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from audits import checks

logger = logging.getLogger(__name__)

AUDIT_TASK_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": max(1, settings.LOOPX_AUDIT_TIME_LIMIT - 60),
    "time_limit": settings.LOOPX_AUDIT_TIME_LIMIT,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 5,
    "max_retries": 3,
    "ignore_result": True,
}


def _log(report: checks.AuditReport) -> dict[str, Any]:
    summary = report.as_dict()
    logger.info("audit %s: %s", report.audit, summary)
    return summary


def _batch(limit: int | None) -> int:
    return limit if limit is not None else settings.LOOPX_AUDIT_BATCH


@shared_task(name="audits.tasks.audit_assessment_sweep", **AUDIT_TASK_OPTIONS)
def audit_assessment_sweep(grace_seconds: int | None = None, limit: int | None = None) -> dict[str, Any]:
    grace = settings.LOOPX_SWEEP_GRACE_SECONDS if grace_seconds is None else grace_seconds
    return _log(
        checks.audit_assessment_sweep(
            grace=timedelta(seconds=grace),
            republish_after=timedelta(seconds=max(grace, settings.LOOPX_SWEEP_REPUBLISH_SECONDS)),
            limit=_batch(limit),
        )
    )


@shared_task(name="audits.tasks.audit_stale_turns", **AUDIT_TASK_OPTIONS)
def audit_stale_turns(idle_seconds: int | None = None, limit: int | None = None) -> dict[str, Any]:
    idle = settings.LOOPX_STALE_TURN_SECONDS if idle_seconds is None else idle_seconds
    return _log(checks.audit_stale_turns(idle=timedelta(seconds=idle), limit=_batch(limit)))


@shared_task(name="audits.tasks.audit_chain_verification", **AUDIT_TASK_OPTIONS)
def audit_chain_verification(record_budget: int | None = None, full_passes: int | None = None) -> dict[str, Any]:
    return _log(
        checks.audit_chain_verification(
            record_budget=settings.LOOPX_CHAIN_RECORDS_PER_PASS if record_budget is None else record_budget,
            full_passes=settings.LOOPX_CHAIN_FULL_PASS_RUNS if full_passes is None else full_passes,
            full_pass_every=timedelta(seconds=settings.LOOPX_CHAIN_FULL_PASS_MIN_AGE_SECONDS),
            limit=settings.LOOPX_AUDIT_BATCH,
        )
    )


@shared_task(name="audits.tasks.audit_engine_change", **AUDIT_TASK_OPTIONS)
def audit_engine_change(limit: int | None = None) -> dict[str, Any]:
    return _log(checks.audit_engine_change(limit=_batch(limit)))


@shared_task(name="audits.tasks.audit_refold", **AUDIT_TASK_OPTIONS)
def audit_refold(sample: int | None = None) -> dict[str, Any]:
    return _log(checks.audit_refold(sample=settings.LOOPX_REFOLD_AUDIT_SAMPLE if sample is None else sample))


@shared_task(name="audits.tasks.audit_unclaimed_blocked_turns", **AUDIT_TASK_OPTIONS)
def audit_unclaimed_blocked_turns(older_than_seconds: int | None = None, limit: int | None = None) -> dict[str, Any]:
    older = settings.LOOPX_BLOCKED_ESCALATION_SECONDS if older_than_seconds is None else older_than_seconds
    return _log(checks.audit_unclaimed_blocked_turns(older_than=timedelta(seconds=older), limit=_batch(limit)))


@shared_task(name="audits.tasks.audit_trail_verification", **AUDIT_TASK_OPTIONS)
def audit_trail_verification() -> dict[str, Any]:
    return _log(checks.audit_trail_verification())
