"""Everything the turn page shows, gathered in a fixed number of queries and shaped for the templates.

The timeline is the plan's phases in order with what committed each one; the fork tree is drawn from the
run's branches (discarded parts greyed, never hidden); the blocking reason is tied to the record that
caused it. Anything taken from a record goes through the store's `record_public` (secrets redacted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Exists, OuterRef, Subquery
from django.urls import reverse

from engine.canonical import STORAGE_CORRUPTION
from engine.types import EFFECT_INDETERMINATE, RUN_LEVEL
from journals.models import Branch, Checkpoint, JournalRecord, Run, Turn
from journals.selectors import record_public
from recovery.findings.models import UNRESOLVED, Finding
from recovery.findings.selectors import turn_findings_open, turn_findings_q
from recovery.models import Assessment, GateDecision, OperatorEvidence, TurnAssessment, TurnClaim
from recovery.packages.models import JournalCorruption
from recovery.recovery_audits.models import RecoveryAudit
from recovery.repair.models import JournalRepair, repair_in_force
from recovery.selectors import GateView, claim_current, gate_view
from recovery.state import StateValue, approval_offer, state_of
from trail.models import OperatorAction

from . import vocabulary
from .forktree import Tree, lay_out
from .models import TurnAnnotation


@dataclass
class PhaseStep:
    position: int
    name: str
    committed: bool
    branch: int | None = None
    lsn: int | None = None
    seq: int | None = None
    at: str | None = None
    is_resume_point: bool = False
    state: str = "missing"  # committed | resume | missing

    @property
    def state_words(self) -> str:
        return {"committed": "committed", "resume": "resume here", "missing": "not committed"}[self.state]


@dataclass
class BlockingFact:
    code: str
    words: str
    run_level: bool
    detail: str | None = None
    line: int | None = None
    branch: int | None = None
    lsn: int | None = None
    kind: str | None = None
    record: dict[str, Any] | None = None
    # storage_corruption from an imported package: the kept lines in force (not stored records; their
    # bytes are never read here), each with its package and the finding whose resolution repairs it.
    kept: list[KeptLineFact] = field(default_factory=list)


@dataclass
class KeptLineFact:
    upload: str  # the package upload's id
    package_name: str
    line: int  # in the package's journal.jsonl
    offset: int
    size: int
    finding: int | None


@dataclass
class AuditView:
    audit: RecoveryAudit
    rows: list[dict[str, Any]]
    divergences: list[Any]
    closed_at: Any = None


@dataclass
class TurnPage:
    turn: Turn
    steps: list[PhaseStep]
    intents: list[Any]
    indeterminate: list[str]
    blocking: BlockingFact | None
    tree: Tree
    checkpoints: list[Checkpoint]
    audits: list[AuditView]
    history: list[OperatorAction]
    gate: GateDecision | None
    evidence: dict[str, list[OperatorEvidence]] = field(default_factory=dict)
    assessment_row: TurnAssessment | None = None

    gate_view: GateView | None = None
    annotation: TurnAnnotation | None = None
    state: StateValue | None = None  # the effective state (recovery/state.py): what every part of the page says
    claim: TurnClaim | None = None
    findings: list[Finding] = field(default_factory=list)  # unresolved (recovery.findings.selectors)
    repair: JournalRepair | None = None  # the run's repair in force

    @property
    def words(self) -> str:
        """What the state means for this turn, naming the repair that set it aside."""
        if self.state is None:
            return vocabulary.state_words(None)
        number = self.repair.number if self.repair is not None else None
        return vocabulary.state_words(str(self.state.state), self.state.reason, number)

    @property
    def approval_in_force(self) -> bool:
        return self.state is not None and self.state.approved

    @property
    def approval_stale(self) -> bool:
        """The latest operator decision is an approval that no longer covers what the engine says."""
        return self.gate is not None and self.gate.kind == "approve" and not self.approval_in_force

    @property
    def held(self) -> bool:
        return self.state is not None and self.state.gate == "hold"

    @property
    def can_approve(self) -> bool:
        """Whether the page offers the approve form (with evidence fields when an effect is unconfirmed).
        The service decides; this only spares the operator a form it is known to refuse."""
        return self.state is not None and approval_offer(self.state.state) != ""


def _steps(turn: Turn) -> list[PhaseStep]:
    by_position = {p.position: p for p in turn.phases.all()}
    plan = turn.plan if isinstance(turn.plan, list) else []
    steps: list[PhaseStep] = []
    for i, name in enumerate(plan):
        row = by_position.get(i)
        step = PhaseStep(position=i, name=str(name), committed=bool(row and row.committed))
        if row is not None and row.committed:
            step.state = "committed"
            step.at = row.committed_at
            if row.record is not None:
                step.branch, step.lsn, step.seq = row.record.branch, row.record.lsn, row.record.seq
        elif turn.resume_from == name and turn.decision == "resume":
            step.state, step.is_resume_point = "resume", True
        steps.append(step)
    if turn.decision != "resume":
        # Blocked and finalize turns also have a point where work would go on: the first uncommitted phase.
        first_open = next((s for s in steps if s.state == "missing"), None)
        if first_open is not None and turn.decision in ("blocked", "finalize"):
            first_open.is_resume_point = True
    return steps


def _indeterminate_dispatch(turn: Turn, intent_ids: list[str]) -> JournalRecord | None:
    """The latest dispatch of the first indeterminate intent: the record an `effect_indeterminate` block
    stems from (the engine names no line for it, since it is a reason and not a violation)."""
    if not intent_ids:
        return None
    wanted = intent_ids[0]
    dispatches = JournalRecord.objects.filter(run_id=turn.run_id, turn=turn.turn_id, kind="intent_dispatched")
    for record in dispatches.order_by("-seq")[:200]:
        public = record_public(record)["record"] or {}
        if public.get("intent") == wanted:
            return record
    return None


def _blocked_by_violation(turn: Turn) -> bool:
    """Whether the page looks the blocking reason up among the assessment's violations (an indeterminate
    effect is a reason, not a violation: contract, section 6)."""
    return turn.decision == "blocked" and bool(turn.reason) and turn.reason != EFFECT_INDETERMINATE


def _violation_list(row: TurnAssessment | None) -> list[Any] | None:
    """The assessment's violations, read with the row (None without a row)."""
    if row is None:
        return None
    found = getattr(row, "violations", None)
    return found if isinstance(found, list) else []


def _blocking(
    turn: Turn, row: TurnAssessment | None, indeterminate: list[str], violations: list[Any]
) -> BlockingFact | None:
    if turn.decision != "blocked" or not turn.reason:
        return None
    fact = BlockingFact(
        code=turn.reason,
        words=vocabulary.reason_words(turn.reason),
        run_level=turn.reason in RUN_LEVEL,
    )
    if row is None:
        return fact
    fact.line = row.reason_line
    for v in violations:
        if not isinstance(v, dict) or v.get("code") != turn.reason:
            continue
        if fact.run_level or v.get("turn") == turn.turn_id:
            fact.branch, fact.lsn, fact.detail = v.get("branch"), v.get("lsn"), v.get("detail")
            break
    record = None
    if fact.line is not None:
        # Lines of the stored journal are the records in seq order, so line N is seq N.
        record = JournalRecord.objects.filter(run_id=turn.run_id, seq=fact.line).first()
    elif turn.reason == EFFECT_INDETERMINATE:
        record = _indeterminate_dispatch(turn, indeterminate)
        if record is not None:
            fact.line = record.seq
    if record is None and turn.reason == STORAGE_CORRUPTION:
        fact.kept = _kept_lines(turn)
        if fact.kept:
            # The assessment reads kept lines after the stored records, so its line number is a position in
            # that reading, not a line of any journal the operator has: the kept lines say where they were.
            fact.line = None
    if record is not None:
        fact.branch = record.branch if fact.branch is None else fact.branch
        fact.lsn = record.lsn if fact.lsn is None else fact.lsn
        fact.kind = record.kind
        fact.record = record_public(record)["record"]
    return fact


KEPT_SHOWN = 20


def _kept_lines(turn: Turn) -> list[KeptLineFact]:
    """The run's kept corrupt lines still in force (one query; never their bytes)."""
    rows = (
        JournalCorruption.objects.in_force(turn.run_id)
        .order_by("upload__created_at", "line_no", "id")
        .values_list("upload_id", "upload__original_name", "line_no", "offset", "size", "finding_id")[:KEPT_SHOWN]
    )
    return [
        KeptLineFact(upload=str(u), package_name=name or "", line=ln, offset=off, size=size, finding=fid)
        for u, name, ln, off, size, fid in rows
    ]


def _tree(turn: Turn, branches: list[Branch], blocking: BlockingFact | None) -> Tree:
    """The run's fork tree (console.forktree, the run page's own layout), with the turn's lane and the record
    that blocks it marked."""
    mark = None
    if blocking is not None and blocking.branch is not None and blocking.lsn is not None:
        mark = (blocking.branch, blocking.lsn)
    records = reverse("console:records", args=[turn.run_id])
    return lay_out(branches, records_url=records, mark=mark, turn_lane=turn.branch)


def _audit_rows(audit: RecoveryAudit) -> AuditView:
    """Planned next to actual, in order; a row is divergent when either side has no partner."""
    planned = [p for p in (audit.planned or []) if isinstance(p, dict)]
    actions = list(audit.actions.all())
    used: set[int] = set()
    rows: list[dict[str, Any]] = []
    for item in planned:
        match = next(
            (a for a in actions if a.pk not in used and a.kind == item.get("kind") and a.target == item.get("target")),
            None,
        )
        if match is not None:
            used.add(match.pk)
        rows.append({"planned": item, "actual": match, "divergent": match is None})
    for a in actions:
        if a.pk not in used:
            rows.append({"planned": None, "actual": a, "divergent": True})
    closure = getattr(audit, "closure", None) if hasattr(audit, "closure") else None
    return AuditView(
        audit=audit,
        rows=rows,
        divergences=list(audit.divergences.all()),
        closed_at=closure.closed_at if closure else None,
    )


def _gate_view(
    turn: Turn, row: TurnAssessment | None, intents: list[Any], violations: list[Any] | None, has: dict[str, bool]
) -> GateView | None:
    """The gate as the store computes it, under the latest stored assessment (reading never assesses),
    from what the page already read: the row, the intents, the violations when it read them (the gate reads
    them itself when an approval needs checking), and whether the turn has decisions and audits at all."""
    if row is None:
        return None
    shown = getattr(row, "shown_id", row.assessment_id)
    # A turn the newest assessment left unchanged has its row in an older one: the gate reads the newest.
    assessment = row.assessment if shown == row.assessment_id else Assessment.objects.defer("output").get(pk=shown)
    return gate_view(
        turn=turn,
        assessment=assessment,
        row=row,
        intents=intents,
        violations=violations,
        no_decisions=not has["decisions"],
        no_audits=not has["audits"],
    )


# What a turn may have beside the journal, asked in the query of its assessment row: most turns have none
# of it (no operator has acted, no recovery was attempted), and each one answered "no" there is a query
# the page does not make (each is a round trip, and a turn page would otherwise make a dozen).
_HAS = {
    "decisions": GateDecision,
    "audits": RecoveryAudit,
    "actions": OperatorAction,
    "evidence": OperatorEvidence,
    "annotation": TurnAnnotation,
}


# Beside the turn's own rows: its unresolved findings (its own and its run's integrity ones) and a repair
# of its run, asked in the same query.
_HAS_MORE = ("findings", "repair")


def _has(row: TurnAssessment | None) -> dict[str, bool]:
    """What the row's query found; an unassessed turn (no row) asks every query instead."""
    return {name: row is None or bool(getattr(row, f"has_{name}")) for name in (*_HAS, *_HAS_MORE)}


def _has_more(turn: Turn) -> dict[str, Exists]:
    findings = Finding.objects.filter(turn_findings_q(turn_pk=turn.pk, run_pk=turn.run_id), state__in=UNRESOLVED)
    return {"has_findings": Exists(findings), "has_repair": Exists(JournalRepair.objects.filter(run_id=turn.run_id))}


def turn_page(turn: Turn) -> TurnPage:
    """The page of a turn its door read with its timeline (journals.doors.turn_for_read, ``timeline``):
    the reader's scope is checked before anything of the page is built."""
    # The assessment the run's projections show, and the turn's row in force under it (its newest at or
    # before it: an assessment writes rows only for the turns it changed), in one query.
    shown = Subquery(
        Assessment.objects.filter(
            run_id=turn.run_id, prefix_last_seq=Subquery(Run.objects.filter(pk=turn.run_id).values("assessed_seq"))
        )
        .order_by("-id")
        .values("id")[:1]
    )
    rows = (
        TurnAssessment.objects.filter(turn=turn, assessment_id__lte=shown)
        .select_related("assessment")
        .defer("assessment__output")  # every turn of the run: megabytes on a large run
        .annotate(shown_id=shown)
        .annotate(**{f"has_{name}": Exists(model._default_manager.filter(turn=turn)) for name, model in _HAS.items()})
        .annotate(**_has_more(turn))
        .order_by("-assessment_id")
    )
    wants_violations = _blocked_by_violation(turn)
    if wants_violations:
        # Only the `violations` key of the assessment shown, in the same query. Reading it still parses the
        # whole stored output, which grows with the run's turns, so it is read only when the blocking reason
        # is a violation.
        rows = rows.annotate(
            violations=Subquery(Assessment.objects.filter(pk=OuterRef("shown_id")).values("output__violations")[:1])
        )
    row = rows.first()
    has = _has(row)
    violations = _violation_list(row) if wants_violations else None
    intents = list(turn.intents.all())
    indeterminate = [i.intent_id for i in intents if i.resolution == "indeterminate" and i.live]
    blocking = _blocking(turn, row, indeterminate, violations or [])
    evidence: dict[str, list[OperatorEvidence]] = {}
    # Evidence is given about an intent: a turn that dispatched none has none to read.
    for e in OperatorEvidence.objects.filter(turn=turn).order_by("-id") if intents and has["evidence"] else ():
        evidence.setdefault(e.intent_id, []).append(e)
    for intent in intents:
        intent.evidence_given = evidence.get(intent.intent_id, [])  # type: ignore[attr-defined]
    branches = list(Branch.objects.filter(run_id=turn.run_id).order_by("number"))
    audits = (
        RecoveryAudit.objects.filter(turn=turn)
        .select_related("closure")
        .prefetch_related("actions", "divergences")
        .order_by("-opened_at", "-id")[:20]
        if has["audits"]
        else []
    )
    view = _gate_view(turn, row, intents, violations, has)
    if view is not None:
        gate = view.operator  # the gate read the decision in force already
    else:
        gate = GateDecision.objects.filter(turn=turn).order_by("-id").first() if has["decisions"] else None
    return TurnPage(
        turn=turn,
        steps=_steps(turn),
        intents=intents,
        indeterminate=indeterminate,
        blocking=blocking,
        tree=_tree(turn, branches, blocking),
        checkpoints=list(
            # The page shows the checkpoint's own fields: not its record (whose raw line may be large).
            Checkpoint.objects.filter(run_id=turn.run_id).order_by("branch", "lsn")[:50]
        ),
        audits=[_audit_rows(a) for a in audits],
        history=(
            list(OperatorAction.objects.filter(turn=turn).order_by("-created_at", "-id")[:100])
            if has["actions"]
            else []
        ),
        gate=gate,
        evidence=evidence,
        assessment_row=row,
        gate_view=view,
        annotation=TurnAnnotation.objects.filter(turn=turn).first() if has["annotation"] else None,
        state=state_of(getattr(turn, "effective", None)),
        claim=view.claim if view is not None else claim_current(turn=turn),
        findings=turn_findings_open(turn_pk=turn.pk, run_pk=turn.run_id) if has["findings"] else [],
        repair=repair_in_force(turn.run_id) if has["repair"] else None,
    )
