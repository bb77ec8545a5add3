"""The scheduled audits' beat rows (django-celery-beat's PeriodicTask) as the API sees them: list, and an
administrator's change of one (enabled, every N seconds), recorded on the trail as ``schedule_change``.
The admin edits the same rows through its own pages (audited there by trail/admin_mixin.py)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

from journals.actors import Actor
from kernel.errors import ServiceError
from trail.services import operator_action_record, reason_clean


class ScheduleError(ServiceError):
    pass


def schedule_state(task: PeriodicTask) -> dict[str, Any]:
    interval = task.interval
    return {
        "id": task.pk,
        "name": task.name,
        "task": task.task,
        "enabled": task.enabled,
        "every_seconds": interval.every * {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}.get(
            interval.period, 0) if interval is not None else None,
        "kwargs": task.kwargs,
        "last_run_at": task.last_run_at.isoformat() if task.last_run_at else None,
    }


def schedule_change(*, task: PeriodicTask, actor: Actor, reason: str, enabled: bool | None = None,
                    every_seconds: int | None = None) -> PeriodicTask:
    """Pause, resume or retime one schedule; beat notices through django-celery-beat's change row."""
    reason = reason_clean(reason=reason)
    if every_seconds is not None and not 1 <= every_seconds <= 7 * 86400:
        raise ScheduleError(400, "interval_invalid", "every_seconds must be 1 to 604800")
    if enabled is None and every_seconds is None:
        raise ScheduleError(400, "nothing_to_change", "give enabled or every_seconds")
    with transaction.atomic():
        locked = PeriodicTask.objects.select_for_update(of=("self",)).select_related("interval").get(pk=task.pk)
        before = schedule_state(locked)
        if enabled is not None:
            locked.enabled = enabled
        if every_seconds is not None:
            if locked.interval is None:
                raise ScheduleError(409, "not_an_interval", "this schedule is not an interval; edit it in the admin")
            locked.interval, _ = IntervalSchedule.objects.get_or_create(every=every_seconds, period="seconds")
        locked.save()  # PeriodicTask.save also moves PeriodicTasks.last_update, which beat watches
        PeriodicTasks.update_changed()
        operator_action_record(actor=actor, kind="schedule_change", reason=reason.strip()[:4000], before=before,
                               after=schedule_state(locked))
    return locked
