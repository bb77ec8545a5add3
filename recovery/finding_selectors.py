"""Reads of findings, for the gate, the console and the API."""

from __future__ import annotations

from django.db.models import QuerySet

from recovery.finding_models import UNRESOLVED, Finding


def run_integrity_finding(*, run_id: int) -> str | None:
    """The kind of the oldest unresolved finding that blocks the run (chain_broken, storage_corruption),
    or None. The recovery gate holds every unfinished turn of such a run (recovery/selectors.py)."""
    return (
        Finding.objects.filter(run_id=run_id, blocks_run=True, state__in=UNRESOLVED)
        .order_by("first_seen", "id")
        .values_list("kind", flat=True)
        .first()
    )


def findings_list(
    *, state: str | None = None, kind: str | None = None, run_id: int | None = None, unresolved: bool = False
) -> QuerySet[Finding]:
    findings = Finding.objects.select_related("run", "turn", "acknowledged_by", "resolved_by")
    if unresolved:
        findings = findings.filter(state__in=UNRESOLVED)
    if state:
        findings = findings.filter(state=state)
    if kind:
        findings = findings.filter(kind=kind)
    if run_id is not None:
        findings = findings.filter(run_id=run_id)
    return findings.order_by("-last_seen", "-id")
