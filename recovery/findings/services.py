"""Writes of findings: the audits open or touch them; operators acknowledge and resolve them.

Every operator transition is an OperatorAction (trail.services.operator_action_record) in the same
transaction, with the finding's state before and after.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from journals.actors import Actor, person_of
from journals.models import Run, Turn
from journals.storable import storable, storable_redacted
from kernel import events
from kernel.errors import ServiceError
from kernel.events import emit
from recovery.findings.models import (
    ACKNOWLEDGED,
    BLOCKING_KINDS,
    FINDING_KINDS,
    KINDS,
    OPEN,
    RESOLVED,
    UNRESOLVED,
    Finding,
)
from recovery.state import turn_states_refresh
from trail.services import actor_display, operator_action_record, reason_clean


class FindingError(ServiceError):
    """A finding transition refused (400 bad arguments, 409 wrong state)."""


def _clean_evidence(evidence: dict[str, Any]) -> dict[str, Any]:
    # Contract section 8: no secret field reaches a finding, and every string must fit a JSON column.
    clean: dict[str, Any] = storable_redacted(evidence)
    return clean


def _unresolved(*, kind: str, run: Run | None, subject: str, fact_key: str) -> Finding | None:
    return (
        Finding.objects.select_for_update()
        .filter(kind=kind, run=run, subject=subject, fact_key=fact_key, state__in=UNRESOLVED)
        .first()
    )


def finding_open_or_touch(
    *, kind: str, run: Run | None, turn: Turn | None = None, fact_key: str = "", evidence: dict[str, Any] | None = None
) -> tuple[Finding, bool]:
    """Open the finding for this fact, or, when it is already open or acknowledged, note that it was seen
    again (last_seen, seen_count, the latest evidence). Returns (finding, opened)."""
    if kind not in FINDING_KINDS:
        raise ValueError(f"unknown finding kind {kind!r}")
    subject = turn.turn_id if turn is not None else ""
    fact_key = storable(fact_key)[:200]
    clean = _clean_evidence(evidence or {})
    now = timezone.now()
    with transaction.atomic():
        found = _unresolved(kind=kind, run=run, subject=subject, fact_key=fact_key)
        if found is None:
            try:
                # A savepoint: a concurrent audit may open the same fact first (the partial unique index).
                with transaction.atomic():
                    created = Finding.objects.create(
                        kind=kind,
                        run=run,
                        turn=turn,
                        subject=subject,
                        fact_key=fact_key,
                        evidence=clean,
                        blocks_run=kind in BLOCKING_KINDS,
                        first_seen=now,
                        last_seen=now,
                    )
                if created.blocks_run:
                    assert run is not None  # the blocking kinds are facts of a run
                    turn_states_refresh(run=run)  # every unfinished turn of the run is now held
                # Metrics and webhooks listen (kernel/events.py); a failing receiver never fails us.
                emit(
                    events.finding_opened,
                    sender=Finding,
                    finding_id=created.pk,
                    kind=kind,
                    run_id=run.run_id if run is not None else None,
                    turn_id=subject or None,
                    summary=KINDS[kind][1],
                )
                return created, True
            except IntegrityError:
                found = _unresolved(kind=kind, run=run, subject=subject, fact_key=fact_key)
                if found is None:
                    raise
        found.last_seen = now
        found.seen_count += 1
        found.evidence = clean
        found.save(update_fields=["last_seen", "seen_count", "evidence"])
        return found, False


def _summary(finding: Finding) -> dict[str, Any]:
    return {"finding": finding.pk, "kind": finding.kind, "state": finding.state, "fact_key": finding.fact_key}


def finding_acknowledge(*, finding: Finding, actor: Actor, reason: str) -> Finding:
    """An operator has seen the finding and owns it; it stays unresolved (and blocking, if it blocks)."""
    reason = reason_clean(reason=reason)
    with transaction.atomic():
        locked = Finding.objects.select_for_update(of=("self",)).select_related("run", "turn").get(pk=finding.pk)
        if locked.state != OPEN:
            raise FindingError(409, "finding_not_open", f"the finding is {locked.state}, not open")
        before = _summary(locked)
        locked.state = ACKNOWLEDGED
        locked.acknowledged_by = person_of(actor)
        locked.acknowledged_at = timezone.now()
        locked.acknowledge_reason = reason
        locked.save(update_fields=["state", "acknowledged_by", "acknowledged_at", "acknowledge_reason"])
        operator_action_record(
            actor=actor, kind="finding_acknowledge", run=locked.run, turn=locked.turn, reason=reason,
            before=before, after=_summary(locked),
        )
    return locked


def finding_resolve(*, finding: Finding, actor: Actor, reason: str) -> Finding:
    """An operator closes the finding. For an integrity finding this lifts the block on the run: the
    reason should say how the journal was repaired or why the difference is accepted. If the audit sees
    the same fact again it opens a new finding; a resolution is never silently undone or redone."""
    reason = reason_clean(reason=reason)
    with transaction.atomic():
        locked = Finding.objects.select_for_update(of=("self",)).select_related("run", "turn").get(pk=finding.pk)
        if locked.state == RESOLVED:
            raise FindingError(409, "finding_resolved", "the finding is already resolved")
        before = _summary(locked)
        _mark_resolved(locked, actor=actor, name=actor_display(actor), reason=reason)
        if locked.blocks_run:
            assert locked.run is not None  # the blocking kinds are facts of a run
            turn_states_refresh(run=locked.run)  # the hold is lifted: the turns' states say so at once
        operator_action_record(
            actor=actor, kind="finding_resolve", run=locked.run, turn=locked.turn, reason=reason,
            before=before, after=_summary(locked),
        )
    return locked


def finding_clear(*, finding: Finding, audit: str, reason: str) -> Finding:
    """The audit saw the condition end (the lost turn wrote again, the blocked turn was handled): the
    finding is resolved by the system, with the reason. Never used for the integrity kinds."""
    if finding.kind in BLOCKING_KINDS:
        raise ValueError("integrity findings are resolved by an operator, never by an audit")
    with transaction.atomic():
        locked = Finding.objects.select_for_update().get(pk=finding.pk)
        if locked.state != RESOLVED:
            _mark_resolved(locked, actor=None, name=f"audit:{audit}", reason=reason)
    return locked


def _mark_resolved(finding: Finding, *, actor: Actor, name: str, reason: str) -> None:
    finding.state = RESOLVED
    finding.resolved_by = person_of(actor)
    finding.resolved_by_name = name
    finding.resolved_at = timezone.now()
    finding.resolution_reason = reason
    finding.save(update_fields=["state", "resolved_by", "resolved_by_name", "resolved_at", "resolution_reason"])


def repair_covers(repair: Any, seq: Any) -> bool:
    """Whether a chain break at record ``seq`` is among the records ``repair`` set aside."""
    through = int(repair.through_seq or 0)
    return isinstance(seq, int) and through < seq <= repair.at_seq


def findings_resolve_by_repair(*, run: Run, repair: Any, actor: Actor) -> list[int]:
    """The run's unresolved ``chain_broken`` findings that a journal repair covers, resolved by the operator
    who applied it (recovery/repair/services.py; the repair's own trail row names them, so none is written here).
    Covered: a break among the quarantined records of an accepted prefix, any break of a superseded
    journal. A ``storage_corruption`` finding is never covered: stored bytes that changed after ingest are
    not a journal fault a repair answers."""
    found = Finding.objects.select_for_update().filter(run=run, kind="chain_broken", state__in=UNRESOLVED)
    resolved: list[int] = []
    for finding in found.order_by("id"):
        if not repair_covers(repair, (finding.evidence or {}).get("seq")):
            continue
        _mark_resolved(
            finding, actor=actor, name=actor_display(actor), reason=f"covered by journal repair #{repair.number}"
        )
        resolved.append(finding.pk)
    return resolved
