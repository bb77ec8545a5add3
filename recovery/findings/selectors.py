"""Reads of findings, for the gate, the console and the API."""

from __future__ import annotations

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
