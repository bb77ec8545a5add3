"""Beat's scheduler: django-celery-beat's DatabaseScheduler (schedules live in the database, editable in
the admin) that also writes beat's heartbeat (audits/heartbeat.py) every LOOPX_HEARTBEAT_SECONDS.
Named by CELERY_BEAT_SCHEDULER in settings."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

from django_celery_beat.schedulers import DatabaseScheduler

from audits.heartbeat import heartbeat_interval, heartbeat_record

logger = logging.getLogger(__name__)


class HeartbeatScheduler(DatabaseScheduler):  # type: ignore[misc]  # django-celery-beat ships no types
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._last_heartbeat = float("-inf")
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval = heartbeat_interval()
        now = time.monotonic()
        if now - self._last_heartbeat >= interval:
            self._last_heartbeat = now
            try:
                heartbeat_record(role="beat", name=f"beat@{socket.gethostname()}", detail={"scheduler": "database"})
            except Exception:  # beat keeps scheduling even when its heartbeat cannot be written
                logger.warning("beat heartbeat could not be written", exc_info=True)
        # Wake up in time for the next heartbeat even when no task is due for longer.
        due: float = super().tick(*args, **kwargs)
        return min(due, interval)
