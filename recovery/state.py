"""A turn's effective state: the one place it is decided, and its one writer.

The engine decides each turn from the committed prefix; operators decide on top (approve, block), the gate
parks crash loops, and an integrity finding of the chain verification holds a whole run. What a person or
a runtime sees is the combination, and it is combined here only:

- ``turn_state_compute`` is the rule, a function of its inputs alone. The recovery gate calls it on every
  answer (recovery/selectors.py) and ``turn_states_refresh`` calls it to store the result.
- ``turn_states_refresh`` writes ``TurnEffective`` (journals/models.py): every page, API answer, count,
  queue, filter, finding, webhook and metric reads the state from there, so they cannot disagree.

Fail closed: a live intent whose outcome nobody knows holds the turn whatever the engine's reason and
whatever an approval said, until an operator gives a finding for it (the engine then settles the intent).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from engine.types import EFFECT_INDETERMINATE, RUN_LEVEL, Code
from journals.access import RunScope
from journals.models import (
    DECISIONS,
    TURN_STATUSES,
    Decision,
    Intent,
    Resolution,
    Run,
    RunStatus,
    Turn,
    TurnEffective,
    TurnState,
)
from journals.remedies import remedy_steps, remedy_text
from kernel.dialect import fetched, rows_update, values_insert, values_read
from kernel.errors import ServiceError
from kernel.events import emit, sending_many, turn_blocked, turn_hold_changed
from recovery.findings.selectors import run_integrity_finding
from recovery.models import Assessment, GateDecision, TurnAssessment
from recovery.recovery_audits.models import RecoveryAudit, RecoveryDivergence
from recovery.repair.models import REPAIR_QUARANTINED

PROCEED, HOLD, DONE = "proceed", "hold", "done"
OPERATOR_BLOCKED = "operator_blocked"
RECOVERY_ATTEMPTS_EXCEEDED = "recovery_attempts_exceeded"
# A recovery did otherwise than the gate planned (an unplanned action, a repeated one, a planned one missing):
# held for review until an operator approves the turn after it.
RECOVERY_DIVERGED = "recovery_diverged"
RUN_LEVEL_CODES = frozenset(str(code) for code in RUN_LEVEL)
# Holds no approval lifts: a fault of the journal, and records a repair set aside (re-sent records decide).
UNAPPROVABLE_REASONS = RUN_LEVEL_CODES | {REPAIR_QUARANTINED}

# States that wait for a person (the blocked queue, the unclaimed-turn finding): an operator's own block
# is held too, but someone already owns it.
WAITING = frozenset(
    {TurnState.HELD_EFFECT, TurnState.HELD_REVIEW, TurnState.HELD_JOURNAL, TurnState.HELD_INTEGRITY, TurnState.PARKED}
)
HELD = WAITING | {TurnState.BLOCKED_OPERATOR}
# Which held states an approval may lift: the one home of the rule, read by the services, the pages, the
# rows and the bulk confirmation. An approval lifts these as they are (the service still checks coverage):
APPROVABLE = frozenset({TurnState.HELD_REVIEW, TurnState.BLOCKED_OPERATOR, TurnState.PARKED})
# ... this one only with evidence for each unconfirmed effect:
APPROVABLE_WITH_EVIDENCE = frozenset({TurnState.HELD_EFFECT})
# ... and these never as they stand: what each needs first (a bulk approval, which gives no evidence, leaves
# all three alone; the confirmation page counts them beforehand).
APPROVAL_NEEDS = {
    TurnState.HELD_EFFECT: "need evidence for an unconfirmed effect",
    TurnState.HELD_JOURNAL: "need a repaired journal",
    TurnState.HELD_INTEGRITY: "need their integrity finding resolved",
}
OFFER_APPROVE, OFFER_WITH_EVIDENCE = "approve", "with_evidence"


@dataclass(frozen=True)
class EngineRow:
    """The engine's decision for one turn (from a stored TurnAssessment or the engine's TurnDecision)."""

    decision: str
    reason: str | None
    resume_from: str | None
    completed: int  # phases committed on the live timeline
    reason_line: int | None = None  # the journal line of the engine's reason, when it names one


@dataclass(frozen=True)
class StateValue:
    state: TurnState
    gate: str
    decision: str
    reason: str | None
    resume_from: str | None
    approved: bool = False
    actor_name: str = ""
    decided_at: datetime | None = None
    note: str = ""
    needs_evidence: tuple[str, ...] = ()
    engine: EngineRow | None = None
    since: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def label(self) -> str:
        return str(TurnState(self.state).label)

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    @property
    def remedy(self) -> list[str]:
        """What lifts the hold, step by step (journals.remedies: the one table); empty when not held."""
        if self.gate != HOLD:
            return []
        return remedy_steps(state=str(self.state), reason=self.reason, needs_evidence=self.needs_evidence)

    @property
    def remedy_text(self) -> str:
        return remedy_text(self.remedy)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape every API answer carries as ``state`` (and OperatorAction before/after)."""
        return {
            "state": str(self.state),
            "label": self.label,
            "gate": self.gate,
            "decision": self.decision,
            "reason": self.reason,
            "resume_from": self.resume_from,
            "operator": self.actor_name or None,
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
            "note": self.note or None,
            "needs_evidence": list(self.needs_evidence),
            "since": self.since.isoformat() if self.since else None,
            "remedy": self.remedy,
        }


def approval_offer(state: str | None) -> str:
    """What the pages offer for a turn in ``state``: the approve button (``approve``), the approve form with
    evidence fields (``with_evidence``), or nothing (""). The service decides; this only spares the operator
    a form it is known to refuse."""
    if state in APPROVABLE:
        return OFFER_APPROVE
    if state in APPROVABLE_WITH_EVIDENCE:
        return OFFER_WITH_EVIDENCE
    return ""


@dataclass(frozen=True)
class ApprovalRefusal:
    """Why no approval may lift a hold: a stable code, one line of words, and the fields that name the fact."""

    code: str
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)


def approval_refusal(*, row: EngineRow, value: StateValue | None) -> ApprovalRefusal | None:
    """The refusal of an approval of a turn the engine read as ``row`` and whose state is ``value`` (the
    evidence given with the approval already read), or None when an approval may lift its hold."""
    if row.decision == Decision.DISCARDED:
        return ApprovalRefusal("turn_discarded", "a turn planned only on a discarded suffix never resumes")
    if row.decision == Decision.BLOCKED and row.reason in RUN_LEVEL_CODES:
        return ApprovalRefusal(
            "run_level_violation",
            "a run-level violation is repaired in the journal, not approved",
            {"violation": row.reason},
        )
    if row.decision == Decision.BLOCKED and row.reason == REPAIR_QUARANTINED:
        return ApprovalRefusal(
            "repair_quarantined",
            "a repair set this turn's records aside: the runtime re-sends them, no approval lets it go on",
        )
    if value is not None and value.needs_evidence:
        return ApprovalRefusal(
            "evidence_required",
            "an effect of this turn is unconfirmed: give evidence (happened / not_happened) for each intent",
            {"intents": list(value.needs_evidence)},
        )
    if value is not None and value.state == TurnState.HELD_INTEGRITY:
        return ApprovalRefusal(
            "integrity_hold",
            "the run's stored records no longer match what was received: resolve its finding first",
            {"finding": value.reason},
        )
    return None


def engine_row(row: Any) -> EngineRow:
    """A TurnAssessment (or anything with its fields) as the rule reads it."""
    decision = getattr(row.decision, "value", row.decision)
    return EngineRow(
        decision=str(decision),
        reason=row.reason,
        resume_from=row.resume_from,
        completed=len(row.completed_phases),
    )


def turn_state_compute(
    *,
    plan: Sequence[str],
    engine: EngineRow,
    operator: GateDecision | None,
    covered: bool,
    indeterminate: Sequence[str],
    integrity: str | None,
    diverged: Sequence[str] = (),
) -> StateValue:
    """The effective state of one turn. ``covered``: the operator decision in force is an approval of the
    engine's current blocking facts (same reason, same violations: ``covers``).
    ``indeterminate``: the turn's live intents whose outcome is unknown. ``integrity``: the kind of an
    unresolved finding that holds the whole run. ``diverged``: the divergences of its recoveries no
    approval came after (recovery/recovery_audits)."""
    who: dict[str, Any] = {}
    if operator is not None:
        who = {"actor_name": operator.actor_name, "decided_at": operator.created_at, "note": operator.reason}
    evidence = tuple(indeterminate)
    base = {"engine": engine, "needs_evidence": evidence, **who}

    if operator is not None and operator.kind == "block":
        value = StateValue(TurnState.BLOCKED_OPERATOR, HOLD, Decision.BLOCKED, OPERATOR_BLOCKED, None, **base)
    elif operator is not None and operator.kind == "park":
        value = StateValue(TurnState.PARKED, HOLD, Decision.BLOCKED, RECOVERY_ATTEMPTS_EXCEEDED, None, **base)
    elif engine.decision == Decision.COMPLETE:
        return StateValue(TurnState.COMPLETE, DONE, Decision.COMPLETE, engine.reason, None, **base)
    elif engine.decision == Decision.DISCARDED:
        return StateValue(TurnState.DISCARDED, DONE, Decision.DISCARDED, engine.reason, None, **base)
    elif engine.decision == Decision.BLOCKED and engine.reason in UNAPPROVABLE_REASONS:
        value = StateValue(TurnState.HELD_JOURNAL, HOLD, Decision.BLOCKED, engine.reason, None, **base)
    elif evidence:
        # Whatever the engine's reason (an indeterminate effect, an unsafe redispatch, ...) and whatever an
        # approval said: nobody knows whether the effect happened, so nothing goes on without a finding.
        reason = engine.reason or "effect_indeterminate"
        value = StateValue(TurnState.HELD_EFFECT, HOLD, Decision.BLOCKED, reason, None, **base)
    elif engine.decision == Decision.BLOCKED and not covered:
        value = StateValue(TurnState.HELD_REVIEW, HOLD, Decision.BLOCKED, engine.reason, None, **base)
    elif diverged:
        # A recovery did otherwise than planned: what it did (or skipped) may matter, so a person looks first.
        value = StateValue(TurnState.HELD_REVIEW, HOLD, Decision.BLOCKED, RECOVERY_DIVERGED, None, **base)
    elif engine.decision == Decision.BLOCKED:
        # The approved fact stays visible as the reason; the turn goes on after its committed phases.
        if engine.completed >= len(plan):
            value = StateValue(
                TurnState.APPROVED, PROCEED, Decision.FINALIZE, engine.reason, None, approved=True, **base
            )
        else:
            value = StateValue(
                TurnState.APPROVED,
                PROCEED,
                Decision.RESUME,
                engine.reason,
                str(plan[engine.completed]),
                approved=True,
                **base,
            )
    else:
        approved = operator is not None and operator.kind == "approve"
        state = (
            TurnState.APPROVED
            if approved
            else (TurnState.FINALIZING if engine.decision == Decision.FINALIZE else TurnState.RESUMING)
        )
        value = StateValue(
            state, PROCEED, engine.decision, engine.reason, engine.resume_from, approved=approved, **base
        )
    if integrity is not None:
        # Stored records no longer match what was received: no decision of anyone's covers that.
        return StateValue(TurnState.HELD_INTEGRITY, HOLD, Decision.BLOCKED, integrity, None, **base)
    return value


# --- Reading the inputs ----------------------------------------------------------------------------


def run_integrity_hold(*, run_id: int) -> str | None:
    """The kind of the oldest unresolved finding that holds the whole run (chain_broken, ...), or None."""

    return run_integrity_finding(run_id=run_id)


class AssessmentCompacted(ServiceError):
    """The assessment read was superseded and compacted meanwhile: its violations are gone (409; ask again)."""


def assessment_violations(assessment: Assessment) -> list[Any]:
    """The assessment's `violations`. When the caller deferred the output (it holds every turn of the run,
    megabytes on a large run), only that key is read from the database. A compacted assessment has none
    to give: that is refused, never read as "no violation" (an approval would cover facts nobody saw)."""
    if "output" not in assessment.get_deferred_fields():
        found: Any = assessment.output.get("violations", [])
        compacted = assessment.output.get("compacted", False)
    else:
        read = Assessment.objects.filter(pk=assessment.pk).values_list("output__violations", "compacted_at").first()
        found, compacted = read if read is not None else (None, True)
    if compacted:
        raise AssessmentCompacted(
            409, "assessment_superseded", "a newer assessment of the run superseded this one meanwhile: ask again"
        )
    return found if isinstance(found, list) else []


def turn_facts(assessment: Assessment, turn_id: str, violations: list[Any] | None = None) -> list[list[Any]]:
    """The turn's violations in the assessment, as (code, branch, lsn): what an approval covers.
    ``violations``: the assessment's, when the caller already has them."""
    return turn_facts_of(assessment_violations(assessment) if violations is None else violations, turn_id)


@dataclass(frozen=True)
class StateInputs:
    """What a turn's effective state reads besides the engine's row, for one turn or many: the operator
    decision in force (the latest of any kind), the live intents whose outcome nobody knows, the run's
    integrity hold, and the divergences of recoveries that no approval came after."""

    operator_of: Mapping[int, GateDecision]
    unknown: Mapping[int, Sequence[str]]
    integrity: str | None
    diverged: Mapping[int, Sequence[str]] = field(default_factory=dict)


def state_inputs_gather(
    *,
    run_id: int,
    turn_pks: Sequence[int] | None = None,
    unknown_of: Mapping[int, Sequence[str]] | None = None,
    read_decisions: bool = True,
    engine: EngineRow | None = None,
    read_divergences: bool = True,
) -> StateInputs:
    """The inputs of the run's turns (all of them, or ``turn_pks``), each read in one query. A caller that
    already holds the turns' intents passes what they say (``unknown_of``: ``unknown_intents`` of them); one
    that knows the turn has no operator decision (or no recovery audit) says so.
    For one turn whose engine row is given, a done turn (finished, and no block over it) skips the integrity
    and divergence reads: no such hold reaches a finished turn."""
    operator_of: dict[int, GateDecision] = {}
    if read_decisions:
        decisions = GateDecision.objects.filter(run_id=run_id)
        if turn_pks is not None:
            decisions = decisions.filter(turn_id__in=list(turn_pks))
        for decision in fetched(decisions.order_by("id"), stream=turn_pks is None, chunk_size=2000):
            operator_of[decision.turn_id] = decision  # the latest decision of any kind is the one in force
    unknown: dict[int, list[str]] = {}
    if unknown_of is not None:
        unknown = {turn_pk: list(intent_ids) for turn_pk, intent_ids in unknown_of.items()}
    else:
        rows = Intent.objects.filter(turn__run_id=run_id, live=True, resolution=Resolution.INDETERMINATE)
        if turn_pks is not None:
            rows = rows.filter(turn_id__in=list(turn_pks))
        for turn_pk, intent_id in rows.order_by("turn_id", "position").values_list("turn_id", "intent_id"):
            unknown.setdefault(turn_pk, []).append(intent_id)
    done = False
    if engine is not None and turn_pks is not None and len(turn_pks) == 1:
        operator = operator_of.get(turn_pks[0])
        finished = engine.decision in (Decision.COMPLETE, Decision.DISCARDED)
        done = finished and (operator is None or operator.kind == "approve")
    integrity = None if done else run_integrity_hold(run_id=run_id)
    # A done turn is past every hold a recovery's divergence could bring: nothing resumes it.
    diverged = recovery_divergences_open(run_id=run_id, turn_pks=turn_pks) if read_divergences and not done else {}
    return StateInputs(operator_of=operator_of, unknown=unknown, integrity=integrity, diverged=diverged)


def unknown_intents(rows: Iterable[tuple[int, str, bool, str]]) -> dict[int, list[str]]:
    """turn pk -> its live intents whose outcome nobody knows, from (turn pk, intent id, live, resolution)
    of its Intent rows in their order: what ``state_inputs_gather`` reads from the rows when not handed it."""
    unknown: dict[int, list[str]] = {}
    for turn_pk, intent_id, live, resolution in rows:
        if live and resolution == Resolution.INDETERMINATE:
            unknown.setdefault(turn_pk, []).append(intent_id)
    return unknown


def recovery_divergences_open(*, run_id: int, turn_pks: Sequence[int] | None = None) -> dict[int, list[str]]:
    """Per turn, the codes of its recoveries' divergences recorded after its latest approval (one query): an
    approval after them is the operator's word that what the recovery did otherwise is understood."""
    approved_at = (
        GateDecision.objects.filter(turn_id=OuterRef("audit__turn_id"), kind="approve")
        .order_by("-id")
        .values("created_at")[:1]
    )
    rows = RecoveryDivergence.objects.filter(audit__run_id=run_id)
    if turn_pks is not None:
        rows = rows.filter(audit__turn_id__in=list(turn_pks))
    open_rows = rows.annotate(approved_at=Subquery(approved_at)).filter(
        Q(approved_at__isnull=True) | Q(created_at__gt=F("approved_at"))
    )
    found: dict[int, list[str]] = {}
    for turn_pk, code in open_rows.order_by("audit__turn_id", "id").values_list("audit__turn_id", "code"):
        codes = found.setdefault(turn_pk, [])
        if code not in codes:
            codes.append(code)
    return found


def turn_facts_of(violations: Iterable[Any], turn_id: str) -> list[list[Any]]:
    """The turn's violations as (code, branch, lsn): what an approval covers."""
    return [
        [v.get("code"), v.get("branch"), v.get("lsn")]
        for v in violations
        if isinstance(v, dict) and v.get("turn") == turn_id
    ]


def covers(operator: GateDecision | None, engine: EngineRow, facts: Callable[[], list[list[Any]]]) -> bool:
    """Whether the operator decision in force is an approval of exactly the engine's current blocking facts:
    the one coverage check of the gate and of the stored states. ``facts`` reads the turn's violations as
    (code, branch, lsn) only when the reason alone does not already answer."""
    if operator is None or operator.kind != "approve" or engine.reason in UNAPPROVABLE_REASONS:
        return False
    return operator.engine_reason == engine.reason and operator.engine_facts == facts()


def turn_state_decide(
    *,
    plan: Any,
    engine: EngineRow,
    operator: GateDecision | None,
    facts: Callable[[], list[list[Any]]],
    indeterminate: Sequence[str],
    integrity: str | None,
    diverged: Sequence[str] = (),
) -> StateValue:
    """The effective state of one turn from the inputs the gate (one turn) and the writer (many) gather:
    its plan, the engine's row, the operator decision in force, its blocking facts, its live intents of
    unknown outcome, the run's integrity hold and its recoveries' divergences no approval came after."""
    return turn_state_compute(
        plan=list(plan) if isinstance(plan, list) else [],
        engine=engine,
        operator=operator,
        covered=covers(operator, engine, facts),
        indeterminate=indeterminate,
        integrity=integrity,
        diverged=diverged,
    )


# --- The engine's picture of a turn ------------------------------------------------------------------


def picture_rows(
    *, run_id: int, through: int | None = None, turn_pks: Iterable[int] | None = None
) -> QuerySet[TurnAssessment]:
    """Each turn's row in force under the assessment ``through`` (None: the newest): the turn's newest row at
    or before it. An assessment writes rows only for the turns that changed (recovery.services), so the
    picture of every turn is one indexed read (``turnassessment_turn_latest``), whichever assessment last
    changed it. A turn without a row there is not in that assessment."""
    newest = _newest_rows(run_id=run_id, through=through, turn_pks=turn_pks)
    if turn_pks is None:
        return TurnAssessment.objects.filter(pk__in=newest)
    # A few turns' rows (a batch's): their ids are read first, then the rows by primary key. In one statement
    # the planner joined the ids to the whole table read in full, a cost that grew with the run
    # (benchmarks/bench_growth.py).
    return TurnAssessment.objects.filter(pk__in=_found(newest))


def picture_values(*, run_id: int, turn_pks: Iterable[int], fields: Sequence[str]) -> list[tuple[Any, ...]]:
    """``fields`` of the rows in force under the newest assessment of a few turns (a batch's; see
    ``picture_rows``), as values: their ids read first, then the rows as a written statement
    (``values_read``)."""
    newest = _newest_rows(run_id=run_id, through=None, turn_pks=turn_pks)
    return values_read(model=TurnAssessment, fields=fields, where={"pk__in": _found(newest)})


def _newest_rows(*, run_id: int, through: int | None, turn_pks: Iterable[int] | None) -> QuerySet[Any, int | None]:
    """The id of the newest row at or before the assessment ``through`` of each of the run's turns (all, or
    ``turn_pks``); None for a turn with none."""
    latest = TurnAssessment.objects.filter(turn_id=OuterRef("pk"))
    if through is not None:
        latest = latest.filter(assessment_id__lte=through)
    turns = Turn.objects.filter(run_id=run_id)
    if turn_pks is not None:
        turns = turns.filter(pk__in=list(turn_pks))
    newest = turns.order_by().annotate(row=Subquery(latest.order_by("-assessment_id").values("pk")[:1]))
    return newest.values_list("row", flat=True)


def _found(newest: QuerySet[Any, int | None]) -> list[int]:
    """The row ids ``_newest_rows`` read, without the turns that have none."""
    return [pk for pk in newest if pk is not None]


def picture_row(*, turn: Turn, through: int | None) -> TurnAssessment | None:
    """One turn's row in force under the assessment ``through`` (see ``picture_rows``)."""
    rows = TurnAssessment.objects.filter(turn=turn)
    if through is not None:
        rows = rows.filter(assessment_id__lte=through)
    return rows.order_by("-assessment_id").first()


def projected_assessment(run: Run) -> Assessment | None:
    """The assessment the run's projections show: the newest one of the projected prefix (output deferred:
    it holds every turn of the run)."""
    if run.assessed_seq is None:
        return None
    return Assessment.objects.filter(run=run, prefix_last_seq=run.assessed_seq).defer("output").order_by("-id").first()


# --- The writer -------------------------------------------------------------------------------------


def turn_states_refresh(
    *,
    run: Run,
    turn_pks: Iterable[int] | None = None,
    assessment: Assessment | None = None,
    violations: list[Any] | None = None,
    engine_rows: Mapping[int, EngineRow] | None = None,
    turn_plans: Mapping[int, tuple[str, Any]] | None = None,
    unknown_of: Mapping[int, Sequence[str]] | None = None,
) -> dict[int, StateValue]:
    """Recompute and store the effective state of the run's turns (all of them, or ``turn_pks``) under
    ``assessment`` (default: the one the run's projections show). Only rows that changed are written; a
    row keeps its ``since`` while its state and reason stay the same, and while the turn stays held (a
    hold's start is kept when its reason changes). Returns turn pk -> state.
    ``turn_plans``: turn pk -> (turn id, plan) of every turn to refresh, from a caller that just wrote them
    (they are not read back); ``unknown_of``: likewise, each one's live intents whose outcome nobody knows."""
    assessment = assessment or projected_assessment(run)
    if assessment is None:
        return {}
    turns = Turn.objects.filter(run=run)
    stored = TurnEffective.objects.filter(run=run)
    wanted = None if turn_pks is None else list(turn_pks)
    if wanted is not None:
        turns, stored = turns.filter(pk__in=wanted), stored.filter(turn_id__in=wanted)
    # The assessment that just stored its rows hands them over: they are not read back.
    engine_of = (
        dict(engine_rows)
        if engine_rows is not None
        else {
            pk: EngineRow(decision, reason, resume_from, len(completed), line)
            for pk, decision, reason, resume_from, completed, line in picture_rows(
                run_id=run.pk, through=assessment.pk, turn_pks=wanted
            )
            .values_list("turn_id", "decision", "reason", "resume_from", "completed_phases", "reason_line")
            .iterator(chunk_size=5000)
        }
    )
    if not engine_of:
        run_status_refresh(run=run)  # a run with no turn still has a journal, sound or not
        return {}
    # Most runs never had a recovery: a plain probe is cheaper to build than the divergences' read.
    audited = RecoveryAudit.objects.filter(run_id=run.pk).exists()
    inputs = state_inputs_gather(run_id=run.pk, turn_pks=wanted, unknown_of=unknown_of, read_divergences=audited)
    operator_of, unknown, integrity = inputs.operator_of, inputs.unknown, inputs.integrity
    if violations is None and any(d.kind == "approve" for d in operator_of.values()):
        violations = assessment_violations(assessment)
    existing = {e.turn_id: e for e in fetched(stored, stream=wanted is None)}
    now = timezone.now()
    create: list[tuple[Any, ...]] = []
    update: list[TurnEffective] = []
    found: dict[int, StateValue] = {}
    newly_held: list[tuple[str, StateValue]] = []
    hold_changes: list[tuple[str, StateValue, str | None]] = []
    listed: Iterable[tuple[int, str, Any]] = (
        turns.values_list("pk", "turn_id", "plan").iterator(chunk_size=5000)
        if turn_plans is None
        else ((pk, *turn_plans[pk]) for pk in sorted(turn_plans))
    )
    for pk, turn_id, plan in listed:
        engine = engine_of.get(pk)
        if engine is None:
            continue
        value = turn_state_decide(
            plan=plan,
            engine=engine,
            operator=operator_of.get(pk),
            facts=partial(turn_facts_of, violations or [], turn_id),
            indeterminate=unknown.get(pk, ()),
            integrity=integrity,
            diverged=inputs.diverged.get(pk, ()),
        )
        fields = _fields(value)
        row = existing.get(pk)
        if value.gate == HOLD and (row is None or row.gate != HOLD):
            newly_held.append((turn_id, value))
        held_before = row is not None and row.gate == HOLD
        moved = row is None or (row.state, row.reason) != (str(value.state), value.reason)
        if moved and (value.gate == HOLD or held_before):
            hold_changes.append((turn_id, value, row.state if row is not None else None))
        if row is None:
            create.append((pk, run.pk, *(fields[k] for k in _FIELDS), now, now))  # _CREATED
            found[pk] = _with_since(value, now)
            continue
        same_state = (row.state, row.reason) == (fields["state"], fields["reason"])
        if any(getattr(row, k) != v for k, v in fields.items()):
            for k, v in fields.items():
                setattr(row, k, v)
            if not same_state and not (held_before and value.gate == HOLD):
                # A hold that only changes its reason or state keeps its start: the wait is the whole hold.
                row.since = now
            row.updated_at = now
            update.append(row)
        found[pk] = _with_since(value, row.since)
    _states_store(run, assessment, create, update, newly_held, hold_changes, integrity=integrity)
    return found


def _states_store(
    run: Run,
    assessment: Assessment,
    create: list[tuple[Any, ...]],
    update: list[TurnEffective],
    newly_held: list[tuple[str, StateValue]],
    hold_changes: Sequence[tuple[str, StateValue, str | None]] = (),
    *,
    integrity: str | None = None,
) -> None:
    """Write the changed rows and the run's status, and send `turn_blocked` (webhooks, metrics) for each turn
    this refresh newly holds, whoever held it, and one `turn_hold_changed` (notifications) naming the turns
    that entered, changed within or left a hold: sent in the transaction, so that deliveries commit with the
    state."""
    with transaction.atomic():
        if create:
            values_insert(model=TurnEffective, fields=_CREATED, rows=create, ignore_conflicts=True)
        if update:
            rows_update(model=TurnEffective, rows=update, fields=[*_FIELDS, "since", "updated_at"])
        run_status_refresh(run=run, integrity=integrity)
        with sending_many():
            _holds_announce(run, assessment, newly_held, hold_changes)


def _holds_announce(
    run: Run,
    assessment: Assessment,
    newly_held: list[tuple[str, StateValue]],
    hold_changes: Sequence[tuple[str, StateValue, str | None]],
) -> None:
    """`turn_blocked` for each newly held turn, then one `turn_hold_changed` (``_states_store``)."""
    for turn_id, value in newly_held:
        emit(
            turn_blocked,
            run_id=run.run_id,
            turn_id=turn_id,
            reason=value.reason,
            reason_line=value.engine.reason_line if value.engine else None,
            assessment_id=assessment.pk,
            state=str(value.state),
        )
    if hold_changes:
        emit(
            turn_hold_changed,
            run_id=run.run_id,
            turns=[
                {"turn_id": turn_id, "state": str(value.state), "gate": value.gate, "previous_state": previous}
                for turn_id, value, previous in hold_changes
            ],
        )


_FIELDS = ("state", "gate", "decision", "reason", "resume_from", "actor_name", "decided_at", "note", "needs_evidence")
# A new row as values (not a model instance, which cost as much to build as the row to write): the turn's
# and the run's pks, ``_FIELDS``, then since and updated_at.
_CREATED = ("turn", "run", *_FIELDS, "since", "updated_at")


def _fields(value: StateValue) -> dict[str, Any]:
    return {
        "state": str(value.state),
        "gate": value.gate,
        "decision": value.decision,
        "reason": value.reason,
        "resume_from": value.resume_from,
        "actor_name": value.actor_name[:150],
        "decided_at": value.decided_at,
        "note": value.note,
        "needs_evidence": list(value.needs_evidence),
    }


def _with_since(value: StateValue, since: datetime) -> StateValue:
    return StateValue(**{**value.__dict__, "since": since})


# --- A run's status -----------------------------------------------------------------------------------

_UNREAD = object()  # the run's integrity hold, when the caller has not read it


def run_status_compute(*, journal_fault: bool, held: bool, unfinished: bool) -> RunStatus:
    """A run's status, in order: ``blocked`` when the journal itself blocks the run (a run-level violation,
    or an integrity finding that holds it); else ``needs_attention`` when any turn is held (the gate holds
    it until a person acts); else ``running`` when anything is unfinished (a turn the gate lets go on, a
    turn or a record not yet assessed, no assessment, no turn); else ``done``: every turn complete or
    discarded. Unknown is never done."""
    if journal_fault:
        return RunStatus.BLOCKED
    if held:
        return RunStatus.NEEDS_ATTENTION
    if unfinished:
        return RunStatus.RUNNING
    return RunStatus.DONE


def run_status_decide(*, run: Run, integrity: object = _UNREAD) -> RunStatus:
    """The status of ``run``'s assessed prefix from its stored turn states (run_status_compute). Each input is
    an indexed probe, read only while the answer still depends on it. ``integrity``: the run's integrity hold,
    when the caller already read it (a kind, or None)."""
    if integrity is _UNREAD:
        integrity = run_integrity_hold(run_id=run.pk)
    if run.blocked_reason is not None or integrity is not None:
        return run_status_compute(journal_fault=True, held=False, unfinished=True)
    states = TurnEffective.objects.filter(run_id=run.pk)
    if states.filter(state__in=sorted(HELD)).exists():
        return run_status_compute(journal_fault=False, held=True, unfinished=True)
    turns = Turn.objects.filter(run_id=run.pk)
    unfinished = (
        run.assessed_seq is None
        or run.last_seq > run.assessed_seq
        or states.filter(state__in=sorted(STATE_GROUPS["proceeding"])).exists()
        or not turns.exists()
        # A turn with no state (fail closed), read last: only a run about to be done reads its turns. The run
        # named inside the subquery too, so the database reads this run's states, not every run's.
        or turns.exclude(Exists(states.filter(turn_id=OuterRef("pk")))).exists()
    )
    return run_status_compute(journal_fault=False, held=False, unfinished=unfinished)


def run_status_refresh(*, run: Run, integrity: object = _UNREAD) -> RunStatus:
    """Decide and store ``run``'s status (Run.status); called by the turn states' writer in its transaction,
    so that the run's status and its turns' states commit together. Writes only a change."""
    status = run_status_decide(run=run, integrity=integrity)
    # Compared in the database, not on ``run``: the caller's copy may predate another writer's change.
    Run.objects.filter(pk=run.pk).exclude(status=status).update(status=status)
    run.status = status
    return status


def state_of(effective: TurnEffective | None) -> StateValue | None:
    """The stored state as the value pages render (None: not yet assessed)."""
    if effective is None:
        return None
    return StateValue(
        state=TurnState(effective.state),
        gate=effective.gate,
        decision=effective.decision,
        reason=effective.reason,
        resume_from=effective.resume_from,
        approved=effective.state == TurnState.APPROVED,
        actor_name=effective.actor_name,
        decided_at=effective.decided_at,
        note=effective.note,
        needs_evidence=tuple(effective.needs_evidence or ()),
        since=effective.since,
    )


# --- The version a person saw ------------------------------------------------------------------------

# What a person sees of a turn's state: a decision made on a page, an API answer or the admin carries the
# version of these, and the services refuse it when the turn has moved since (``state_version``).
VERSIONED = ("state", "gate", "decision", "reason", "resume_from", "actor_name", "decided_at", "note", "needs_evidence")
STATE_CHANGED = "state_changed"
# The one operator word for each state an operator (or the gate) put the turn in.
_DECIDED_BY = {TurnState.BLOCKED_OPERATOR: "blocked", TurnState.APPROVED: "approved", TurnState.PARKED: "parked"}


def state_version(value: StateValue | None) -> str:
    """The version of a turn's effective state as a person sees it: a short digest of what the pages and
    the API show (the state, the gate's answer, the reason, who decided, when and why, the intents that
    need evidence). It changes exactly when one of those does; a turn not yet assessed has a version too.
    ``since`` is left out: it moves only with the state and reason."""
    fields: dict[str, Any] = dict.fromkeys(VERSIONED)
    if value is not None:
        fields = {
            "state": str(value.state),
            "gate": value.gate,
            "decision": str(value.decision),
            "reason": value.reason,
            "resume_from": value.resume_from,
            "actor_name": value.actor_name[:150],  # as TurnEffective stores it
            "decided_at": value.decided_at.isoformat() if value.decided_at else None,
            "note": value.note,
            "needs_evidence": sorted(value.needs_evidence),
        }
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def state_change_words(value: StateValue | None) -> str:
    """What a turn is now, in the words a refused decision or the turn page's banner uses: "blocked by ada
    at 12:03 UTC: second pair of eyes", "now held for review (unsafe redispatch)"."""
    if value is None:
        return "it is not yet assessed"
    verb = _DECIDED_BY.get(TurnState(value.state))
    if verb is not None and value.actor_name:
        when = f" at {value.decided_at.astimezone(UTC):%H:%M} UTC" if value.decided_at else ""
        note = f": {value.note}" if value.note else ""
        return f"{verb} by {value.actor_name}{when}{note}"
    reason = f" ({value.reason.replace('_', ' ')})" if value.reason and value.gate == HOLD else ""
    return f"now {value.label}{reason}"


def state_seen_check(*, value: StateValue | None, seen: str | None) -> None:
    """Refuse a decision made on a version of the turn's state that is no longer the current one (``seen``:
    the version the person saw; None: the caller does not say, and nothing is checked)."""
    if seen is None or seen == state_version(value):
        return
    raise StateChanged(value)


class StateChanged(ServiceError):
    """A decision made on a state the turn has left: 409 `state_changed`, naming what it is now."""

    def __init__(self, value: StateValue | None) -> None:
        super().__init__(
            409,
            STATE_CHANGED,
            f"the turn changed since you looked: {state_change_words(value)}",
            state=value.as_dict() if value is not None else None,
            state_version=state_version(value),
        )
        self.value = value


# --- Reading many turns by state ---------------------------------------------------------------------

UNASSESSED = "unassessed"
# The filter names a list, a bulk decision and the bulk API share (console.forms.TurnFilterForm,
# recovery.serializers.BulkRequestSerializer): the same names select the same turns everywhere.
FILTER_NAMES = ("q", "state", "decision", "reason", "status", "run", "age")
# Groups of states a filter may name beside a single state.
STATE_GROUPS: dict[str, frozenset[str]] = {
    "held": frozenset(str(s) for s in HELD),
    "waiting": frozenset(str(s) for s in WAITING),
    "proceeding": frozenset({TurnState.RESUMING, TurnState.FINALIZING, TurnState.APPROVED}),
}
AGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
# The values each filter name takes, with their words (what a form shows).
FILTER_CHOICES: dict[str, list[tuple[str, str]]] = {
    "state": [("held", "held (any reason)"), ("waiting", "waiting for a person")]
    + [(str(s), str(s.label)) for s in TurnState]
    + [("proceeding", "the gate lets it go on"), (UNASSESSED, "not yet assessed")],
    "decision": [(d, d) for d in DECISIONS] + [(UNASSESSED, "not yet assessed")],
    "reason": sorted(
        [(c.value, c.value.replace("_", " ")) for c in Code]
        + [
            (EFFECT_INDETERMINATE, "effect indeterminate"),
            (OPERATOR_BLOCKED, "operator blocked"),
            (RECOVERY_ATTEMPTS_EXCEEDED, "recovery attempts exceeded"),
            (RECOVERY_DIVERGED, "recovery diverged"),
            (REPAIR_QUARANTINED, "repair quarantined"),
        ]
    ),
    "status": [(s, s) for s in TURN_STATUSES],
    # Age of the turn's latest change. "Newer than" finds what just happened, "older than" what is stuck.
    "age": [
        ("lt1h", "changed in the last hour"),
        ("lt24h", "changed in the last 24 hours"),
        ("lt7d", "changed in the last 7 days"),
        ("gt1h", "unchanged for over an hour"),
        ("gt24h", "unchanged for over 24 hours"),
        ("gt7d", "unchanged for over 7 days"),
    ],
}


# The schema's names for the filter's value sets (settings.SPECTACULAR_SETTINGS' ENUM_NAME_OVERRIDES).
STATE_FILTER_VALUES = [value for value, _ in FILTER_CHOICES["state"]]
DECISION_FILTER_VALUES = [value for value, _ in FILTER_CHOICES["decision"]]


def age_q(age: str, field_name: str) -> Q:
    delta = AGES.get(age[2:])
    if delta is None:
        return Q()
    cutoff = timezone.now() - delta
    return Q(**{f"{field_name}__gte": cutoff}) if age.startswith("lt") else Q(**{f"{field_name}__lt": cutoff})


def turns_matching(*, filters: Mapping[str, Any], scope: RunScope) -> QuerySet[Turn]:
    """The turns of ``scope``'s runs a filter names (values already validated by the caller's form), with
    their run and their effective state joined. ``state``: a TurnState, a group (held, waiting, proceeding)
    or unassessed; ``decision`` and ``reason``: the effective ones, as the gate answers."""
    turns = Turn.objects.select_related("run", "effective", "assignment__assignee").filter(scope.q("run__run_id"))
    assignee = filters.get("assignee")  # a username, or "none" (the console resolves "me")
    if assignee == "none":
        turns = turns.filter(assignment__isnull=True)
    elif assignee:
        turns = turns.filter(assignment__assignee__username=assignee)
    q = filters.get("q")
    if q:
        turns = turns.filter(_search_q(q))
    if UNASSESSED in (filters.get("state"), filters.get("decision")):
        turns = turns.filter(effective__isnull=True)
    turns = turns.filter(state_filter_q(filters, "effective__"))
    if filters.get("status"):
        turns = turns.filter(status=filters["status"])
    if filters.get("run"):
        # The run's key first (a subquery the database runs once): then the run's turns are read along its
        # index in the list's order (turn_run_updated_id), and a page reads its own rows, not every turn of
        # the run (``python -m benchmarks.bench_pages --scale 10``: the turns list of one run).
        turns = turns.filter(run_id=Subquery(Run.objects.filter(run_id=filters["run"]).values("pk")[:1]))
    if filters.get("age"):
        turns = turns.filter(age_q(filters["age"], "updated_at"))
    return turns


# A search names the runs whose id it matches by key up to this many; past it, it matches the run ids in the
# turns' query itself (so many runs match that a page is found early along the order's index anyway).
SEARCH_RUNS = 1_000


def _search_q(q: str) -> Q:
    """The turns whose id, lineage or run id contains ``q``, any case. The runs that match are read first
    (one query, through run_run_id_trgm on PostgreSQL): then each of the three parts is an index condition
    on the turn (the trigram indexes of journals 0015, the run's turns index), the planner knows how few
    turns a rare search matches, and finds and sorts them rather than walk the list's order past every turn
    (``python -m benchmarks.bench_pages --scale 10``: the search page)."""
    runs = list(Run.objects.order_by().filter(run_id__icontains=q).values_list("pk", flat=True)[: SEARCH_RUNS + 1])
    in_runs = Q(run_id__in=runs) if len(runs) <= SEARCH_RUNS else Q(run__run_id__icontains=q)
    return Q(turn_id__icontains=q) | in_runs | Q(lineage__icontains=q)


def state_filter_q(filters: Mapping[str, Any], prefix: str = "") -> Q:
    """The part of a filter on the effective state, over TurnEffective's columns (``prefix``: the way to
    them, ``effective__`` from a turn). ``unassessed`` names turns with no state: not a condition on one."""
    q = Q()
    state = filters.get("state")
    if state in STATE_GROUPS:
        q &= Q(**{f"{prefix}state__in": sorted(STATE_GROUPS[state])})
    elif state and state != UNASSESSED:
        q &= Q(**{f"{prefix}state": state})
    decision = filters.get("decision")
    if decision and decision != UNASSESSED:
        q &= Q(**{f"{prefix}decision": decision})
    if filters.get("reason"):
        q &= Q(**{f"{prefix}reason": filters["reason"]})
    return q


def states_matching(*, filters: Mapping[str, Any], scope: RunScope) -> QuerySet[TurnEffective] | None:
    """The state rows of the turns ``turns_matching`` finds, when the filter names only the state and the
    run (every state row has its turn): what counts them from the state's own indexes. None when the filter
    names a column of the turn, or turns with no state."""
    if any(filters.get(k) for k in ("q", "status", "age", "assignee")) or UNASSESSED in (
        filters.get("state"),
        filters.get("decision"),
    ):
        return None
    states = TurnEffective.objects.filter(scope.q("run__run_id"), state_filter_q(filters))
    if filters.get("run"):
        states = states.filter(run__run_id=filters["run"])
    return states


def bulk_candidates(*, filters: Mapping[str, Any], action: str, scope: RunScope) -> QuerySet[Turn]:
    """The turns of a filter a bulk decision hands to the service: every held turn for an approval (the
    service refuses, one by one, those that need evidence or a repair), every turn not done and not already
    blocked by an operator for a block."""
    turns = turns_matching(filters=filters, scope=scope)
    if action == "approve":
        return turns.filter(effective__gate=HOLD)
    open_turn = ~Q(effective__gate=DONE) & ~Q(effective__state=TurnState.BLOCKED_OPERATOR)
    return turns.filter(Q(effective__isnull=True) | open_turn)


def state_counts(*, scope: RunScope, runs: Iterable[int] | None = None) -> dict[str, int]:
    """Turns of ``scope``'s runs by effective state (one grouped query), over every run or some; not yet
    assessed turns are the turns with no state."""
    states = TurnEffective.objects.order_by().filter(scope.q("run__run_id"))
    turns = Turn.objects.order_by().filter(scope.q("run__run_id"))
    if runs is not None:
        wanted = list(runs)
        states, turns = states.filter(run_id__in=wanted), turns.filter(run_id__in=wanted)
    counts = {s: n for s, n in states.values_list("state").annotate(n=Count("turn_id")).values_list("state", "n")}
    counts[UNASSESSED] = max(0, turns.count() - sum(counts.values()))
    return counts
