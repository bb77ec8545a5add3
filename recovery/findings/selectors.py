"""Reads of findings, for the gate, the console and the API."""

from __future__ import annotations

from django.db.models import Q

from recovery.findings.models import UNRESOLVED, Finding


def run_integrity_finding(*, run_id: int) -> str | None:
    """The kind of the oldest unresolved finding that blocks the run (chain_broken, storage_corruption),
    or None. The recovery gate holds every unfinished turn of such a run (recovery/selectors.py)."""
    return (
        Finding.objects.filter(run_id=run_id, blocks_run=True, state__in=UNRESOLVED)
        .order_by("first_seen", "id")
        .values_list("kind", flat=True)
        .first()
    )


def turn_findings_q(*, turn_pk: int, run_pk: int) -> Q:
    """A turn's findings: its own (a turn gone quiet, a held turn nobody took, ...) and those of its run that
    hold every turn of it (an integrity finding). The turn page and the findings list's ``turn`` filter
    both read this, so the page's count is the list's."""
    return Q(turn_id=turn_pk) | Q(run_id=run_pk, turn__isnull=True, blocks_run=True)


def turn_findings_open(*, turn_pk: int, run_pk: int, limit: int = 20) -> list[Finding]:
    """The turn's unresolved findings (turn_findings_q), the latest seen first."""
    rows = Finding.objects.filter(turn_findings_q(turn_pk=turn_pk, run_pk=run_pk), state__in=UNRESOLVED)
    return list(rows.order_by("-last_seen", "-id")[:limit])
