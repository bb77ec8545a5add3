"""Celery tasks of the recovery app: thin (ids in, re-read, call a service) and idempotent.

Every task is acknowledged late and rejected (requeued) when its worker process dies, so a crash in the
middle runs it again; the services make a second run find its work already done (recovery/background.py).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from recovery.background import assessment_run
from recovery.imports.services import history_abandon, history_process, history_reimport
from recovery.packages.models import PackageUpload
from recovery.packages.services import package_abandon, package_process, package_sweep

logger = logging.getLogger(__name__)

# Every task of this module: acknowledged late and requeued when its worker dies; a database that is briefly
# unreachable or locked (SQLite under a writer) is worth another try, any other error is not.
TASK_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "max_retries": 5,
    "ignore_result": True,
}


@shared_task(
    name="recovery.tasks.assess_run",
    soft_time_limit=max(1, settings.LOOPX_ASSESS_TIME_LIMIT - 30),
    time_limit=settings.LOOPX_ASSESS_TIME_LIMIT,
    # Any error but the database's leaves the run behind its prefix, which the scheduled sweep notices.
    **TASK_OPTIONS,
)
def assess_run(run_id: str) -> str:
    """Assess a run's committed prefix (coalesced: one pending assessment per run). The task's id holds the
    run's lease, so a redelivery of this message takes it over at once."""
    return assessment_run(run_id=run_id, task_id=assess_run.request.id)


# Verification reads up to LOOPX_PACKAGE_MAX_TOTAL_BYTES (512 MiB by default) and the import ingests up to a
# 64 MiB journal: minutes, not seconds. The soft limit comes a minute early, to record why the task stopped.
PACKAGE_TIME_LIMIT: int = settings.LOOPX_PACKAGE_TIME_LIMIT


@shared_task(
    name="recovery.tasks.validate_package",
    soft_time_limit=max(1, PACKAGE_TIME_LIMIT - 60),
    time_limit=PACKAGE_TIME_LIMIT,
    # Every step is a compare-and-set on the upload's state, so a retry (or a redelivery) resumes where the
    # last one stopped.
    **TASK_OPTIONS,
)
def validate_package(upload_id: str) -> str:
    """Verify an uploaded package (recovery/packages/services.py) and import it as a run when accepted."""
    try:
        return package_process(upload_id=upload_id)
    except (OperationalError, InterfaceError):
        raise  # the database: retried (autoretry_for), the upload stays where it was
    except SoftTimeLimitExceeded:
        detail = f"not finished within {max(1, PACKAGE_TIME_LIMIT - 60)} seconds"
        return _abandon(upload_id, timed_out=True, detail=detail)
    except Exception:
        # A hostile archive may find a bug in the verifier: the upload is refused (or its import fails) with
        # the error in the worker's log, never retried into the same bug, never left "checking" for ever.
        logger.exception("validate_package failed for upload %s", upload_id)
        return _abandon(upload_id, timed_out=False, detail="stopped on an unexpected error (see the worker's log)")


@shared_task(
    name="recovery.tasks.convert_history",
    soft_time_limit=max(1, PACKAGE_TIME_LIMIT - 60),
    time_limit=PACKAGE_TIME_LIMIT,
    # Every step is a compare-and-set on the import's state: a redelivery finds the work done.
    **TASK_OPTIONS,
)
def convert_history(import_id: str) -> str:
    """Convert an uploaded history with its import's effect map and store its runs
    (recovery/imports/services.py)."""
    try:
        return history_process(import_id=import_id)
    except (OperationalError, InterfaceError):
        raise  # the database: retried (autoretry_for), the import stays where it was
    except SoftTimeLimitExceeded:
        return history_abandon(import_id=import_id, error="import_timed_out", detail="not finished in time")
    except Exception:
        # Never retried into the same bug, never left "converting" for ever: a typed failure, the error in
        # the worker's log.
        logger.exception("convert_history failed for import %s", import_id)
        return history_abandon(
            import_id=import_id, error="import_error", detail="stopped on an unexpected error (see the worker's log)"
        )


@shared_task(
    name="recovery.tasks.reimport_history",
    soft_time_limit=max(1, PACKAGE_TIME_LIMIT - 60),
    time_limit=PACKAGE_TIME_LIMIT,
    **TASK_OPTIONS,
)
def reimport_history(import_id: str, map_version_id: int) -> str:
    """A map got a new version: import the same history again with it, as a new generation of runs (the
    stored ones are never rewritten). Safe twice: the generation made for this version is found."""
    made = history_reimport(import_id=import_id, map_version_id=map_version_id)
    return made.state if made is not None else "missing"


def _abandon(upload_id: str, *, timed_out: bool, detail: str) -> str:
    try:
        upload = PackageUpload.objects.filter(pk=uuid.UUID(str(upload_id))).first()
    except ValueError:
        return "missing"
    if upload is None:
        return "missing"
    return package_abandon(upload=upload, timed_out=timed_out, detail=detail).state


@shared_task(
    name="recovery.tasks.sweep_packages",
    soft_time_limit=max(1, settings.LOOPX_AUDIT_TIME_LIMIT - 30),
    time_limit=settings.LOOPX_AUDIT_TIME_LIMIT,
    **TASK_OPTIONS,
)
def sweep_packages(grace_seconds: int | None = None, orphan_grace_seconds: int | None = None) -> dict[str, Any]:
    """On beat's schedule and once at worker start: publish validate_package again for uploads whose message
    was lost, remove upload files no upload names, and re-assess runs whose torn tail was repaired
    (recovery/packages/services.py, ``package_sweep``). A schedule's kwargs override the settings."""
    from datetime import timedelta

    report = package_sweep(
        grace=timedelta(seconds=grace_seconds) if grace_seconds is not None else None,
        orphan_grace=timedelta(seconds=orphan_grace_seconds) if orphan_grace_seconds is not None else None,
    )
    return report.as_dict()


@worker_ready.connect(dispatch_uid="loopx-sweep-packages-at-start", weak=False)
def sweep_packages_at_start(sender: Any = None, **_: Any) -> None:
    """A worker that starts (after a crash, a deploy, a broker outage) asks for one sweep at once instead of
    waiting for beat: uploads stranded while nothing ran are picked up. Publishing never stops the worker."""
    try:
        sweep_packages.apply_async(retry=False)
    except Exception:  # the broker is down: beat's schedule runs the sweep later
        logger.warning("could not publish sweep_packages at worker start", exc_info=True)
