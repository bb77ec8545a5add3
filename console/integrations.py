"""Reads from the background side (heartbeats, findings) shaped for the overview."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from audits.models import Heartbeat
from journals.access import RunScope
from recovery.findings.models import UNRESOLVED, Finding

# A process that has not beaten for this long is shown as silent (workers beat every minute or so).
STALE_AFTER = timedelta(seconds=getattr(settings, "LOOPX_HEARTBEAT_STALE_SECONDS", 180))


@dataclass
class Beat:
    name: str
    role: str
    hostname: str
    at: datetime
    stale: bool


def heartbeats() -> list[Beat]:
    now = timezone.now()
    return [
        Beat(name=h.name, role=h.role, hostname=h.hostname, at=h.last_seen, stale=now - h.last_seen > STALE_AFTER)
        for h in Heartbeat.objects.order_by("role", "name")[:20]
    ]


def open_findings(limit: int = 8, *, scope: RunScope) -> list[Finding]:
    return list(
        # The run's id is shown, the turn's by the finding's own `subject`: no join to the turn's wide row.
        Finding.objects.filter(scope.q("run__run_id"), state__in=UNRESOLVED)
        .select_related("run")
        .order_by("-last_seen", "-id")[:limit]
    )
