"""Reads of the recovery state, and the gate: what a runtime may do with a turn right now.

The gate combines three things, in this order of precedence:
1. the operator: a block in force holds the turn; the gate's own parking (crash loop) holds it too;
2. the engine's decision for the committed prefix (with the operator evidence in force);
3. an operator's approval, which lets a blocked turn proceed while the engine's blocking fact is the one
   that was approved (same reason, same journal line). Run-level violations are never approvable: the
   journal must be repaired (fail-closed: an unverifiable prefix is unknown, and unknown blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from engine import OffsetMismatch
from journals.models import Intent, Resolution, Run, Turn
from recovery.models import Assessment, GateDecision, OperatorEvidence, TurnAssessment, TurnClaim
from recovery.recovery_audits.models import RecoveryAudit
from recovery.state import (
    DONE,
    HOLD,
    OPERATOR_BLOCKED,
    PROCEED,
    RECOVERY_ATTEMPTS_EXCEEDED,
    RUN_LEVEL_CODES,
    StateValue,
    engine_row,
    picture_row,
    state_inputs_gather,
    turn_facts,
    turn_state_decide,
    unknown_intents,
)

__all__ = ["DONE", "HOLD", "OPERATOR_BLOCKED", "PROCEED", "RECOVERY_ATTEMPTS_EXCEEDED", "RUN_LEVEL_CODES"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # "since the beginning", where no approval resets a count


@dataclass
class GateView:
    turn: Turn
    assessment: Assessment
    row: TurnAssessment
    operator: GateDecision | None
    claim: TurnClaim | None
    attempts: int
    max_attempts: int
    gate: str  # the gate's answer: proceed, hold or done (the API's JSON names it ``state``)
    decision: str
    reason: str | None
    resume_from: str | None
    approved: bool
    intents: list[Intent] = field(default_factory=list)
    value: StateValue | None = None  # the effective state (recovery/state.py), of which the fields above are parts
    # The runtime's expected high-water (``?expect``) that the store does not hold: the turn is held.
    offset_mismatch: OffsetMismatch | None = None
    # The stored assessment is behind the committed prefix: this answer was folded in memory for the asker
    # and stored nowhere (the worker's task stores it).
    pending: bool = False

    @property
    def progress_key(self) -> str:
        return progress_key(self.row)

    @property
    def planned(self) -> list[dict[str, Any]]:
        return planned_actions(self.turn, self.row, self.intents) if self.gate == PROCEED else []

    def summary(self) -> dict[str, Any]:
        """A compact, JSON-safe picture of the gate (OperatorAction before/after)."""
        return {
            "state": self.gate,
            "decision": self.decision,
            "reason": self.reason,
            "resume_from": self.resume_from,
            "engine_decision": self.row.decision,
            "engine_reason": self.row.reason,
            "operator": self.operator.kind if self.operator else None,
            "attempts": self.attempts,
            "assessment": self.assessment.pk,
            "effective": str(self.value.state) if self.value else None,
        }


def progress_key(row: TurnAssessment) -> str:
    """The turn's committed progress on the live timeline: attempts that do not move it are a loop."""
    return f"{len(row.completed_phases)}|{row.terminal or ''}"


def planned_actions(turn: Turn, row: TurnAssessment, intents: list[Intent]) -> list[dict[str, Any]]:
    """What a recovery of this turn should do: its missing phases, its live unsettled intents, the end."""
    plan = list(turn.plan)
    actions: list[dict[str, Any]] = [{"kind": "phase", "target": p} for p in plan[len(row.completed_phases) :]]
    for intent in intents:
        if intent.live and intent.resolution in (Resolution.REPLAY, Resolution.REISSUE):
            action: dict[str, Any] = {
                "kind": "intent",
                "target": intent.intent_id,
                "resolution": intent.resolution,
                "effect_class": intent.effect_class,
            }
            if intent.resolution == Resolution.REISSUE:
                action["idempotency_key"] = intent.idempotency_key
            actions.append(action)
    if row.terminal is None:
        actions.append({"kind": "terminal", "target": "turn_terminal"})
    return actions


def claim_current(*, turn: Turn) -> TurnClaim | None:
    """The claim whose lease holds now, if any."""
    return (
        TurnClaim.objects.filter(turn=turn, released_at__isnull=True, expires_at__gt=timezone.now())
        .order_by("-fencing_token")
        .first()
    )


def attempts_without_progress(*, turn: Turn, key: str) -> int:
    """Recovery audits opened in a row (newest first) at the turn's current progress, after the latest
    approval. An approval resets the count; progress breaks the run of equal keys. The approval's time is
    a subquery of the same query (no approval: since the beginning)."""

    approved_at = GateDecision.objects.filter(turn=turn, kind="approve").order_by("-id").values("created_at")[:1]
    audits = RecoveryAudit.objects.filter(turn=turn, opened_at__gte=Coalesce(Subquery(approved_at), Value(EPOCH)))
    count = 0
    for audit_key in audits.order_by("-id").values_list("progress_key", flat=True).iterator():
        if audit_key != key:
            break
        count += 1
    return count


def gate_view(
    *,
    turn: Turn,
    assessment: Assessment,
    row: TurnAssessment | None = None,
    intents: list[Intent] | None = None,
    violations: list[Any] | None = None,
    no_decisions: bool = False,
    no_audits: bool = False,
) -> GateView:
    """The gate for ``turn`` under ``assessment`` (which the caller refreshed). A caller that already read
    the turn's row in force under that assessment (or made it in memory), its intents (in position order)
    or the assessment's violations passes them, and says when it found the turn has no operator decision
    or no recovery audit at all, so that the gate does not read them again."""
    if row is None or row.turn_id != turn.pk:
        # The turn's row in force under the assessment: its newest at or before it (rows are written only
        # for turns that changed). A caller passing a row read it so.
        row = picture_row(turn=turn, through=assessment.pk)
        if row is None:
            raise TurnAssessment.DoesNotExist(f"turn {turn.pk} is not in assessment {assessment.pk}")
    key = progress_key(row)
    attempts = 0 if no_audits else attempts_without_progress(turn=turn, key=key)
    if intents is None:
        intents = list(Intent.objects.filter(turn=turn).order_by("position"))
    engine = engine_row(row)
    # An unresolved integrity finding of the chain verification (stored records no longer match what was
    # ingested) holds every unfinished turn of the run until a person resolves it; no approval covers it.
    inputs = state_inputs_gather(
        run_id=turn.run_id,
        turn_pks=[turn.pk],
        unknown_of=unknown_intents((i.turn_id, i.intent_id, i.live, i.resolution) for i in intents),
        read_decisions=not no_decisions,
        engine=engine,
        read_divergences=not no_audits,
    )
    operator = inputs.operator_of.get(turn.pk)
    value = turn_state_decide(
        plan=turn.plan,
        engine=engine,
        operator=operator,
        facts=lambda: turn_facts(assessment, turn.turn_id, violations),
        indeterminate=inputs.unknown.get(turn.pk, ()),
        integrity=inputs.integrity,
        diverged=inputs.diverged.get(turn.pk, ()),
    )
    return GateView(
        turn=turn,
        assessment=assessment,
        row=row,
        operator=operator,
        claim=claim_current(turn=turn),
        attempts=attempts,
        max_attempts=settings.LOOPX_MAX_RECOVERY_ATTEMPTS,
        gate=value.gate,
        decision=value.decision,
        reason=value.reason,
        resume_from=value.resume_from,
        approved=value.approved,
        intents=intents,
        value=value,
    )


def assessments_list(*, run: Run) -> QuerySet[Assessment]:
    return Assessment.objects.filter(run=run).order_by("-id")


def evidence_in_force(*, run: Run) -> dict[tuple[str, str], Any]:
    """The engine's `evidence` argument: per (turn, intent), the latest finding about each dispatch as
    (finding, dispatch number) pairs, so that a finding never outlives the dispatch it was about (found by
    the composition gate: an old `not_happened` must not settle a later send). Rows from before dispatch
    numbers were recorded pass as a bare finding (the engine binds it to the first unsettled dispatch)."""
    exact: dict[tuple[str, str], dict[int, str]] = {}
    bare: dict[tuple[str, str], str] = {}
    rows = (
        OperatorEvidence.objects.filter(run=run)
        .order_by("id")
        .values_list("turn__turn_id", "intent_id", "finding", "dispatch")
    )
    for turn_id, intent_id, finding, dispatch in rows:
        if dispatch is None:
            bare[(turn_id, intent_id)] = finding
        else:
            exact.setdefault((turn_id, intent_id), {})[dispatch] = finding
    found: dict[tuple[str, str], Any] = dict(bare)
    for key, by_dispatch in exact.items():
        found[key] = sorted((finding, number) for number, finding in by_dispatch.items())
    return found


def evidence_list(*, turn: Turn) -> QuerySet[OperatorEvidence]:
    return OperatorEvidence.objects.filter(turn=turn).order_by("-id")


def gate_decisions_list(*, turn: Turn) -> QuerySet[GateDecision]:
    return GateDecision.objects.filter(turn=turn).order_by("-id")
