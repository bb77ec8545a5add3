"""Reads of other engineers' models that operability needs, in one place so that a rename there is one
edit here: the scheduled audits' findings and heartbeats (audits)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Max
from django.utils import timezone

from audits.models import Heartbeat
from recovery.findings.models import FINDING_KINDS, Finding

FINDING_OPEN_STATES = ("open",)
# Findings that keep a run from being removed by retention: anything not resolved.
FINDING_UNRESOLVED_STATES = ("open", "acknowledged")


def open_findings_by_kind() -> dict[str, int]:
    """Open findings per kind; every known kind is present (0 when none), so alerts see a series."""
    counts = dict.fromkeys(FINDING_KINDS, 0)
    rows = Finding.objects.filter(state__in=FINDING_OPEN_STATES).order_by().values("kind").annotate(n=Count("id"))
    for row in rows:
        counts[row["kind"]] = row["n"]
    return counts


def beat_heartbeat_age() -> float | None:
    """Seconds since the most recent beat heartbeat (audits.Heartbeat, role "beat"); None when none."""
    last: datetime | None = Heartbeat.objects.filter(role="beat").aggregate(last=Max("last_seen"))["last"]
    if last is None:
        return None
    return max(0.0, (timezone.now() - last).total_seconds())
