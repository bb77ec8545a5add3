"""Heartbeats of the background processes, for the console's overview (``heartbeats_overview``).

Workers: a worker bootstep (``WorkerHeartbeat``, added to the Celery app in loopx_site/celery.py) writes a
row every LOOPX_HEARTBEAT_SECONDS from the worker's own timer, so a worker that is alive but idle still
beats, and one whose main process hangs stops beating. Beat: its scheduler (audits/beat.py) writes its row
on the same rhythm. This module is imported by loopx_site/celery.py before Django is set up, so model
imports stay inside the functions.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import bootsteps

logger = logging.getLogger(__name__)


def heartbeat_record(*, role: str, name: str, detail: dict[str, Any] | None = None) -> None:
    """Upsert the process's row; started_at is kept from the first beat of the same pid."""
    from django.db import close_old_connections, connection
    from django.utils import timezone

    # Celery's app loads this module before Django's app registry is ready; the model waits until a beat.
    from audits.models import Heartbeat

    # Timer threads are no request: drop a connection the database closed meanwhile, as a request would
    # (never inside a transaction, whose connection is in use).
    if not connection.in_atomic_block:
        close_old_connections()
    now = timezone.now()
    pid = os.getpid()
    updated = Heartbeat.objects.filter(name=name, pid=pid).update(last_seen=now, detail=detail or {})
    if not updated:
        Heartbeat.objects.update_or_create(
            name=name,
            defaults={"role": role, "hostname": socket.gethostname(), "pid": pid, "started_at": now,
                      "last_seen": now, "detail": detail or {}},
        )


def heartbeat_interval() -> float:
    from django.conf import settings

    return float(settings.LOOPX_HEARTBEAT_SECONDS)


@dataclass(frozen=True)
class HeartbeatView:
    role: str
    name: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen: datetime
    age_seconds: int
    alive: bool


def heartbeats_overview(*, now: datetime | None = None) -> dict[str, list[HeartbeatView]]:
    """{"worker": [...], "beat": [...]}, newest first; ``alive`` when the last beat is less than three
    intervals old (one missed beat is not yet a dead process)."""
    from django.utils import timezone

    # Celery's app loads this module before Django's app registry is ready; the model waits until a beat.
    from audits.models import Heartbeat

    now = now or timezone.now()
    stale = timedelta(seconds=3 * heartbeat_interval())
    overview: dict[str, list[HeartbeatView]] = {"worker": [], "beat": []}
    for row in Heartbeat.objects.order_by("-last_seen")[:100]:
        overview.setdefault(row.role, []).append(
            HeartbeatView(
                role=row.role, name=row.name, hostname=row.hostname, pid=row.pid, started_at=row.started_at,
                last_seen=row.last_seen, age_seconds=int((now - row.last_seen).total_seconds()),
                alive=now - row.last_seen < stale,
            )
        )
    return overview


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Beat from the worker's timer while the worker runs; a failed write is logged, never fatal."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        self._beat(worker)
        self.tref = worker.timer.call_repeatedly(heartbeat_interval(), self._beat, (worker,), priority=10)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    def _beat(self, worker: Any) -> None:
        try:
            heartbeat_record(
                role="worker",
                name=str(worker.hostname),
                detail={"concurrency": getattr(worker, "concurrency", None),
                        "pool": type(getattr(worker, "pool", None)).__module__.rsplit(".", 1)[-1]},
            )
        except Exception:  # the heartbeat must never take the worker down
            logger.warning("worker heartbeat could not be written", exc_info=True)
