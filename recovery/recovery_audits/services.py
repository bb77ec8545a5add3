"""Writes of recovery audits: the plan, the actions actually taken, and their divergences.

A recovery audit is opened under a claim's fencing token with the gate's plan; the runtime reports each
action it actually takes and closes the audit; differences become typed divergences:
`unplanned_action` (done, not planned), `repeated_action` (planned, done twice), `planned_action_missing`
(planned, not reported by the close).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from journals.models import Turn
from journals.storable import storable, storable_redacted
from recovery.recovery_audits.models import (
    ACTION_KINDS,
    RecoveryAudit,
    RecoveryAuditAction,
    RecoveryAuditClosure,
    RecoveryDivergence,
)
from recovery.selectors import DONE, HOLD
from recovery.services import GateError, claim_require, gate_locked, turn_park
from recovery.state import turn_states_refresh


def recovery_audit_open(*, turn: Turn, fencing_token: int) -> RecoveryAudit:
    """Open a recovery of ``turn`` under the current claim: the audit's plan is the gate's decision.

    Refused (409) with a stale token, when the gate holds or there is nothing to recover, and when the
    turn has had LOOPX_MAX_RECOVERY_ATTEMPTS recoveries without progress: then the gate parks the turn
    (`recovery_attempts_exceeded`) until an operator approves. The parking is committed even though the
    request is refused.
    """
    parked: GateError | None = None
    with transaction.atomic():
        locked, view = gate_locked(turn=turn)  # the assessment refreshed first, then the turn locked
        claim = claim_require(turn=locked, fencing_token=fencing_token)
        if view.gate == HOLD:
            raise GateError(409, "turn_blocked", "the gate holds this turn", reason=view.reason)
        if view.gate == DONE:
            raise GateError(409, "nothing_to_recover", "the turn needs no recovery", decision=view.decision)
        if view.attempts >= view.max_attempts:
            turn_park(turn=locked, view=view)
            parked = GateError(
                409,
                "recovery_attempts_exceeded",
                "too many recoveries without progress: the turn is blocked until an operator approves",
                attempts=view.attempts,
                max_attempts=settings.LOOPX_MAX_RECOVERY_ATTEMPTS,
            )
        else:
            return RecoveryAudit.objects.create(
                run=locked.run,
                turn=locked,
                claim=claim,
                fencing_token=claim.fencing_token,
                worker_id=claim.worker_id,
                assessment=view.assessment,
                decision=view.decision,
                resume_from=view.resume_from,
                progress_key=view.progress_key,
                attempt=view.attempts + 1,
                planned=storable(view.planned),
            )
    raise parked


def _closure(audit: RecoveryAudit) -> RecoveryAuditClosure | None:
    return RecoveryAuditClosure.objects.filter(audit=audit).first()


def _lock_for_audit(audit: RecoveryAudit, fencing_token: int) -> None:
    Turn.objects.select_for_update().get(pk=audit.turn_id)  # serialises reports of one turn
    if _closure(audit) is not None:
        raise GateError(409, "audit_closed", "this recovery audit is closed")
    if not isinstance(fencing_token, int) or isinstance(fencing_token, bool) or fencing_token != audit.fencing_token:
        raise GateError(409, "stale_token", "the fencing token is not the one this audit was opened with")
    claim_require(turn=audit.turn, fencing_token=fencing_token)


def recovery_audit_action_report(
    *, audit: RecoveryAudit, fencing_token: int, kind: str, target: str, detail: dict[str, Any] | None = None
) -> RecoveryAuditAction:
    """Record an action the runtime actually took; a divergence when it was not planned or repeated."""
    if kind not in ACTION_KINDS:
        raise GateError(400, "action_invalid", f"kind must be one of {', '.join(ACTION_KINDS)}")
    if not isinstance(target, str) or not target or len(target) > 200:
        raise GateError(400, "action_invalid", "target must be a string of 1 to 200 characters")
    if detail is not None and not isinstance(detail, dict):
        raise GateError(400, "action_invalid", "detail must be an object")
    target = storable(target)
    with transaction.atomic():
        _lock_for_audit(audit, fencing_token)
        previous = list(audit.actions.order_by("position").values_list("kind", "target"))
        planned = {(a["kind"], a["target"]) for a in audit.planned}
        action = RecoveryAuditAction.objects.create(
            audit=audit,
            position=len(previous) + 1,
            kind=kind,
            target=target,
            # Runtimes may echo arguments: secret fields never reach the store's projections.
            detail=storable_redacted(detail or {}),
            planned=(kind, target) in planned,
        )
        if (kind, target) not in planned:
            code, text = "unplanned_action", f"{kind} {target!r} was done but not planned"
        elif (kind, target) in previous:
            code, text = "repeated_action", f"{kind} {target!r} was done more than once"
        else:
            return action
        RecoveryDivergence.objects.create(audit=audit, code=code, kind=kind, target=target, action=action, detail=text)
        # The turn is held for review at once (recovery/state.py): the gate stops the next step of a recovery
        # that already did otherwise than planned.
        turn_states_refresh(run=audit.run, turn_pks=[audit.turn_id])
        return action


def recovery_audit_close(*, audit: RecoveryAudit, fencing_token: int, note: str = "") -> RecoveryAuditClosure:
    """Close the audit: every planned action never reported becomes `planned_action_missing`."""
    if not isinstance(note, str) or len(note) > 4000:
        raise GateError(400, "note_invalid", "note must be a string of at most 4000 characters")
    with transaction.atomic():
        _lock_for_audit(audit, fencing_token)
        done = set(audit.actions.values_list("kind", "target"))
        missing = [a for a in audit.planned if (a["kind"], a["target"]) not in done]
        RecoveryDivergence.objects.bulk_create(
            [
                RecoveryDivergence(
                    audit=audit,
                    code="planned_action_missing",
                    kind=a["kind"],
                    target=a["target"],
                    detail=f"{a['kind']} {a['target']!r} was planned but not reported before the close",
                )
                for a in missing
            ]
        )
        closure = RecoveryAuditClosure.objects.create(
            audit=audit, note=storable(note), divergence_count=audit.divergences.count()
        )
        if missing:
            turn_states_refresh(run=audit.run, turn_pks=[audit.turn_id])  # a skipped step holds the turn
        return closure
