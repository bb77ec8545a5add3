"""Recovery state: stored assessments, per-turn decisions, claims (leases with fencing tokens), operator
evidence and the operator's approvals and blocks (and the gate's own parking of crash loops).

The engine (engine/) is pure; these models remember what it said about which prefix, and what
people decided about it.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from journals.models import DECISIONS, ID_MAX, Evidence, Run, Turn
from kernel.appendonly import AppendOnlyModel

# The sub-domains' models (findings, recovery audits, imports, packages, repair, review assignments) live in
# their own sub-packages; imported here so that Django registers them with this app.
from recovery.assignments.models import TurnAssignment  # noqa: F401
from recovery.findings.models import Finding  # noqa: F401
from recovery.imports.models import (  # noqa: F401
    EffectMap,
    EffectMapAttachment,
    EffectMapVersion,
    HistoryImport,
    HistorySource,
    ImportedIntent,
    ImportedRun,
    ImportedTurn,
)
from recovery.packages.models import PackageUpload  # noqa: F401
from recovery.recovery_audits.models import (  # noqa: F401
    RecoveryAudit,
    RecoveryAuditAction,
    RecoveryAuditClosure,
    RecoveryDivergence,
)
from recovery.repair.models import JournalRepair  # noqa: F401


def _in(field: str, values: tuple[str, ...], *, null: bool = False) -> Q:
    q = Q(**{f"{field}__in": values})
    return q | Q(**{f"{field}__isnull": True}) if null else q


# The output of a compacted assessment: a newer one superseded it; its identity, digests and counts stay.
COMPACTED_OUTPUT: dict[str, bool] = {"compacted": True}


class Assessment(models.Model):
    """The engine's output for one committed prefix of a run, one engine version and one set of evidence.

    Identity: (run, prefix_key, evidence_digest, engine_version, projection_version) is unique, so the
    same inputs are never assessed into two rows. Operator evidence is an input of the engine (contract
    section 6), hence part of the identity.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="assessments")
    prefix_records = models.BigIntegerField()
    prefix_last_seq = models.BigIntegerField()
    prefix_digest = models.CharField(max_length=64)
    prefix_key = models.CharField(max_length=120)
    evidence_digest = models.CharField(max_length=64)
    engine_version = models.CharField(max_length=40)
    projection_version = models.CharField(max_length=40)
    output = models.JSONField()
    live_branch = models.IntegerField(default=0)
    blocked_reason = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # What stays of an assessment once a newer one supersedes it and its output is compacted: how many
    # turns it decided, how many of them changed from the picture before it (the TurnAssessment rows it
    # wrote), and the sha256 of its output as first stored.
    turn_count = models.IntegerField(default=0)
    rows_written = models.IntegerField(default=0)
    output_digest = models.CharField(max_length=64, blank=True, default="")
    compacted_at = models.DateTimeField(null=True, blank=True)
    # The digest of the fold snapshot the engine started from (only the records after it were read);
    # null: the whole prefix was folded.
    from_snapshot = models.CharField(max_length=64, null=True, blank=True)
    # How many turns the engine's output lists, and the sum of their entries' digests (recovery/output.py):
    # ``output`` then holds the run-level part only and each turn's entry is an OutputEntry row where it
    # changed. Null on an assessment stored whole (its ``output`` lists the turns itself).
    turn_entries = models.IntegerField(null=True, blank=True)
    entries_sum = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        ordering = ["run", "-prefix_last_seq", "-id"]
        get_latest_by = "id"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "prefix_key", "evidence_digest", "engine_version", "projection_version"],
                name="assessment_unique_identity",
            ),
        ]

    def __str__(self) -> str:
        return f"assessment {self.pk} of run {self.run_id}"


class TurnAssessment(models.Model):
    """One turn's decision where it changed: an assessment writes a row only for a turn that is new or whose
    engine picture (decision, reason, resume_from, completed phases, reason line, terminal) differs from
    the picture before it. A turn's picture under an assessment is its newest row at or before that
    assessment (``recovery.state.picture_rows``); the rows together are the history of its decisions."""

    # Both read through the composite indexes below, which lead with them: single-column indexes would
    # only cost every batch's inserts. Both kept by statement triggers on PostgreSQL (kernel/references.py).
    assessment = models.ForeignKey(
        Assessment, on_delete=models.CASCADE, related_name="turn_rows", db_index=False, db_constraint=False
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.PROTECT, related_name="assessments", db_index=False, db_constraint=False
    )
    decision = models.CharField(max_length=16)
    reason = models.CharField(max_length=64, null=True, blank=True)
    resume_from = models.TextField(null=True, blank=True)
    completed_phases = models.JSONField(default=list)
    reason_line = models.BigIntegerField(null=True, blank=True)
    terminal = models.CharField(max_length=16, null=True, blank=True)

    class Meta:
        ordering = ["assessment", "id"]
        constraints = [
            models.UniqueConstraint(fields=["assessment", "turn"], name="turnassessment_unique"),
            models.CheckConstraint(condition=_in("decision", DECISIONS), name="turnassessment_decision_valid"),
        ]
        indexes = [models.Index(fields=["turn", "-assessment"], name="turnassessment_turn_latest")]

    def __str__(self) -> str:
        return f"{self.turn_id}: {self.decision}"


class OutputEntry(models.Model):
    """One turn's entry in an assessment's output (the engine's stable JSON of the turn, redacted), where it
    changed: an assessment writes an entry only at a position of its output whose entry differs from the
    one in force before it. The entry in force at a position under an assessment is the newest one at or
    before it (``recovery.output.assessment_output_read``). Positions are the engine's order of turns."""

    # Read through outputentry_unique, outputentry_latest and outputentry_turn, which lead with them; kept by
    # statement triggers on PostgreSQL (kernel/references.py).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False)
    assessment = models.ForeignKey(
        Assessment, on_delete=models.CASCADE, related_name="entries", db_index=False, db_constraint=False
    )
    ordinal = models.IntegerField()
    # sha256 of the engine's turn id: where a turn stands, for an assessment that lists only some turns.
    turn_digest = models.CharField(max_length=64)
    entry = models.JSONField()
    # sha256 of the canonical [ordinal, entry]: the next assessment compares its entries with it.
    digest = models.CharField(max_length=64)

    class Meta:
        ordering = ["assessment", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["assessment", "ordinal"], name="outputentry_unique")]
        indexes = [
            models.Index(fields=["run", "ordinal", "-assessment"], name="outputentry_latest"),
            models.Index(fields=["run", "turn_digest"], name="outputentry_turn"),
        ]

    def __str__(self) -> str:
        return f"entry {self.ordinal} of assessment {self.assessment_id}"


class FoldSnapshot(models.Model):
    """The engine's fold after a run's records through ``through_seq``, so that the next assessment reads only
    the records after it (engine/incremental.py). One per run: a newer one replaces it. ``data`` is the
    snapshot's manifest; its parts are the run's SnapshotPart rows."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="fold_snapshot")
    through_seq = models.BigIntegerField()
    lines = models.BigIntegerField()
    digest = models.CharField(max_length=64)
    data = models.BinaryField()
    engine_version = models.CharField(max_length=40)
    projection_version = models.CharField(max_length=40)
    evidence_digest = models.CharField(max_length=64)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"fold snapshot of run {self.run_id} through seq {self.through_seq}"


class SnapshotPart(models.Model):
    """One part of a run's fold snapshot (engine/parts.py), numbered as its manifest lists it, the head 0. A
    new snapshot replaces only the parts whose digest changed and deletes those its manifest no longer names."""

    # Read through snapshot_part_unique_number, which leads with it.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="snapshot_parts", db_index=False)
    number = models.IntegerField()
    digest = models.CharField(max_length=64)
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="snapshot_part_unique_number")]

    def __str__(self) -> str:
        return f"part {self.number} of run {self.run_id}'s fold snapshot"


class TurnClaim(models.Model):
    """A lease on a turn for one worker. The fencing token only grows per turn (Turn.fencing_counter)."""

    turn = models.ForeignKey(Turn, on_delete=models.PROTECT, related_name="claims")
    worker_id = models.CharField(max_length=ID_MAX)
    fencing_token = models.BigIntegerField()
    acquired_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["turn", "-fencing_token"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "fencing_token"], name="claim_unique_token"),
            models.CheckConstraint(condition=Q(fencing_token__gte=1), name="claim_token_gte_1"),
        ]

    def __str__(self) -> str:
        return f"claim {self.fencing_token} of turn {self.turn_id} by {self.worker_id}"

    def holds(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.released_at is None and self.expires_at > now


FINDINGS: tuple[str, ...] = tuple(Evidence.values)


class OperatorEvidence(AppendOnlyModel):
    """An operator's finding about one dispatch of an intent (contract section 6). The latest per dispatch
    is in force."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="evidence")
    turn = models.ForeignKey(Turn, on_delete=models.PROTECT, related_name="evidence")
    intent_id = models.CharField(max_length=ID_MAX)
    finding = models.CharField(max_length=16, choices=Evidence.choices)
    # How many dispatches the intent had when the operator looked: the finding is about that dispatch and
    # no later one (the engine binds it exactly; a later send is a new fact). Null on rows from before.
    dispatch = models.PositiveIntegerField(null=True, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["turn", "intent_id", "-id"]
        constraints = [models.CheckConstraint(condition=_in("finding", FINDINGS), name="evidence_finding_valid")]


GATE_KINDS = ("approve", "block", "park")


class GateDecision(AppendOnlyModel):
    """An approval or block by an operator, or the gate parking a crash loop. The latest one is in force.

    An approval records the engine's blocking reason and the turn's violations at the time, and covers
    exactly those facts: any further violation of the turn later needs a new approval (fail-closed).
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="gate_decisions")
    turn = models.ForeignKey(Turn, on_delete=models.PROTECT, related_name="gate_decisions")
    kind = models.CharField(max_length=16, choices=[(k, k) for k in GATE_KINDS])
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    assessment = models.ForeignKey(Assessment, null=True, on_delete=models.PROTECT, related_name="+")
    engine_decision = models.CharField(max_length=16, null=True, blank=True)
    engine_reason = models.CharField(max_length=64, null=True, blank=True)
    engine_reason_line = models.BigIntegerField(null=True, blank=True)
    # The turn's violations (code, branch, lsn) when approved: an approval covers exactly these facts.
    engine_facts = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["turn", "-id"]
        constraints = [models.CheckConstraint(condition=_in("kind", GATE_KINDS), name="gatedecision_kind_valid")]
