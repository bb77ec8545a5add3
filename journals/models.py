"""The journal store: runs, their branches and turns, and the append-only records as received.

JournalRecord is the evidence: the exact bytes of every line, in the order they arrived (``seq``), never
updated or deleted. Everything else here (Run counters, Branch cursors and lineage, Turn, Phase, Intent)
is a projection that ingest and assessments keep current for fast reads; it can always be rebuilt from the
records.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

from django.db import models
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.utils import timezone

from engine import types as engine_types
from kernel.appendonly import AppendOnlyModel

EMPTY_PREFIX_DIGEST = hashlib.sha256(b"").hexdigest()


# Any: a TextChoices class made at run time, whose members (Decision.BLOCKED) the type checker cannot see;
# the stubs' TextChoices() overloads do not take (name, (value, label)) pairs either.
def engine_choices(name: str, values: type[StrEnum]) -> Any:
    """Django's choices for one of the engine's enums: the values are the engine's own, so a decision,
    an effect class or a resolution is spelled in one place; the label is the value in words."""
    return models.TextChoices(name, [(m.name, (m.value, m.value.replace("_", " "))) for m in values])  # type: ignore[call-overload]


Decision = engine_choices("Decision", engine_types.Decision)
EffectClass = engine_choices("EffectClass", engine_types.EffectClass)
Resolution = engine_choices("Resolution", engine_types.Resolution)
Evidence = engine_choices("Evidence", engine_types.Evidence)

DECISIONS: tuple[str, ...] = tuple(Decision.values)
TURN_STATUSES = ("open", "completed", "failed", "cancelled")
# Identifier columns are indexed; ingest refuses longer ids (`identifier_too_long`) so an index never
# overflows and no id is silently truncated.
ID_MAX = 200


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v.replace("_", " ")) for v in values]


def _in(field: str, values: tuple[str, ...], *, null: bool = False) -> Q:
    q = Q(**{f"{field}__in": values})
    return q | Q(**{f"{field}__isnull": True}) if null else q


class ApiToken(models.Model):
    """A runtime's credential. Only the sha256 of the token is stored; the token is shown once."""

    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    run_prefix = models.CharField(
        max_length=ID_MAX,
        blank=True,
        default="",
        help_text="When set, the token may only touch runs whose id starts with it.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def allows_run(self, run_id: str) -> bool:
        return run_id.startswith(self.run_prefix)


class RunStatus(models.TextChoices):
    """A run's status as people sort and filter by it (docs/state.md, "A run's status"): decided once from
    its turns' effective states by recovery.state.run_status_compute and stored on the run by the turn states'
    writer; read through ``run_status_shown`` and ``run_status_q``."""

    BLOCKED = "blocked", "blocked: the journal is at fault"
    NEEDS_ATTENTION = "needs_attention", "needs attention"
    RUNNING = "running", "running"
    DONE = "done", "done"


# The statuses in the order a list sorts them: what needs a person first.
RUN_STATUS_ORDER = (RunStatus.BLOCKED, RunStatus.NEEDS_ATTENTION, RunStatus.RUNNING, RunStatus.DONE)
# Records past the assessed prefix, or no assessment yet: nobody has looked at them, so the run is not done
# (fail closed). The stored status is the assessed prefix's; this is what keeps a done one from showing done.
UNASSESSED_TAIL = Q(assessed_seq__isnull=True) | Q(last_seq__gt=F("assessed_seq"))


def run_status_shown(*, status: str, last_seq: int, assessed_seq: int | None) -> str:
    """The status a run shows: its stored one, except that a done run with records not yet assessed runs."""
    if status == RunStatus.DONE and (assessed_seq is None or last_seq > assessed_seq):
        return str(RunStatus.RUNNING)
    return str(status)


def run_status_q(status: str) -> Q:
    """The runs that show ``status`` (run_status_shown, as a condition on the stored columns)."""
    if status == RunStatus.DONE:
        return Q(status=RunStatus.DONE) & ~UNASSESSED_TAIL
    if status == RunStatus.RUNNING:
        return Q(status=RunStatus.RUNNING) | (Q(status=RunStatus.DONE) & UNASSESSED_TAIL)
    return Q(status=status)


def run_status_rank() -> Case:
    """The position of the status a run shows in RUN_STATUS_ORDER: what a list sorts by."""
    return Case(
        *(When(run_status_q(s), then=Value(i)) for i, s in enumerate(RUN_STATUS_ORDER)),
        default=Value(len(RUN_STATUS_ORDER)),
        output_field=IntegerField(),
    )


class Run(models.Model):
    run_id = models.CharField(max_length=ID_MAX, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)  # its latest batch of records
    # Its latest change: a record, or a person's act on it or one of its turns (journals/changes.py).
    changed_at = models.DateTimeField(default=timezone.now, db_index=True)
    # The committed prefix's identity: how many records, the last seq, and a running digest over the
    # record digests in seq order (sha256(previous prefix digest + record digest)).
    record_count = models.BigIntegerField(default=0)
    last_seq = models.BigIntegerField(default=0)
    prefix_digest = models.CharField(max_length=64, default=EMPTY_PREFIX_DIGEST)
    # From the latest assessment (null until one ran).
    live_branch = models.IntegerField(null=True, blank=True)
    blocked_reason = models.CharField(max_length=64, null=True, blank=True)
    assessed_seq = models.BigIntegerField(null=True, blank=True)
    # The assessed prefix's status (RunStatus), kept by recovery.state.turn_states_refresh in the transaction
    # that stores the turns' states. Running until the first assessment says otherwise.
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)

    class Meta:
        ordering = ["-updated_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(record_count__gte=0), name="run_record_count_gte_0"),
            models.CheckConstraint(condition=Q(last_seq__gte=0), name="run_last_seq_gte_0"),
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="run_status_valid"),
        ]
        indexes = [
            # The runs list filtered by status, latest change first: a range of this index read in order.
            models.Index(fields=["status", "-updated_at", "-id"], name="run_status_updated"),
        ]

    def __str__(self) -> str:
        return self.run_id

    @property
    def status_shown(self) -> str:
        """The status this run shows (run_status_shown): what every page and answer says."""
        return run_status_shown(status=self.status, last_seq=self.last_seq, assessed_seq=self.assessed_seq)

    @property
    def prefix_key(self) -> str:
        return f"{self.record_count}:{self.last_seq}:{self.prefix_digest}"


class Branch(models.Model):
    """One branch of a run. Cursors come from ingest; lineage from the latest assessment."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="branches")
    number = models.IntegerField()
    # Highest lsn stored, and the ack cursor: highest lsn n such that lsns 0..n are all stored (-1: none).
    last_lsn = models.BigIntegerField(default=-1)
    committed_lsn = models.BigIntegerField(default=-1)
    record_count = models.BigIntegerField(default=0)
    parent = models.IntegerField(null=True, blank=True)
    from_lsn = models.BigIntegerField(null=True, blank=True)
    fork_lsn = models.BigIntegerField(null=True, blank=True)
    discarded_from = models.BigIntegerField(null=True, blank=True)
    live = models.BooleanField(default=False)

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="branch_unique_per_run"),
            models.CheckConstraint(condition=Q(number__gte=0), name="branch_number_gte_0"),
            models.CheckConstraint(condition=Q(committed_lsn__lte=models.F("last_lsn")), name="branch_cursor_order"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.number}"


# What an assessment writes on a turn (recovery.services), and so what lists, the API and the admin show of
# it: one list, so that a field added to the projection reaches every one of them.
TURN_ASSESSED_FIELDS = (
    "lineage",
    "branch",
    "plan",
    "status",
    "decision",
    "reason",
    "resume_from",
    "completed_phases",
)
# Columns of a turn list's row (journals.selectors.turn_rows). The two JSON columns come as their text and
# are parsed by orjson in TurnSerializer.row: Django's JSONField converter (json.loads per value) was a
# visible share of a page.
TURN_ROW_FIELDS = (
    *("id", "turn_id"),
    *(f for f in TURN_ASSESSED_FIELDS if f not in ("plan", "completed_phases")),
    *("created_at", "updated_at"),
)


class Turn(models.Model):
    # No index of its own: turn_unique_per_run and turn_run_updated_id lead with run_id.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="turns", db_index=False)
    turn_id = models.CharField(max_length=ID_MAX)
    lineage = models.TextField(null=True, blank=True)
    branch = models.IntegerField(default=0)
    plan = models.JSONField(default=list)
    first_seq = models.BigIntegerField(default=0)
    # Denormalised from the latest assessment so that lists filter without touching it.
    status = models.CharField(max_length=16, choices=_choices(TURN_STATUSES), default="open")
    decision = models.CharField(max_length=16, choices=Decision.choices, null=True, blank=True)
    reason = models.CharField(max_length=64, null=True, blank=True)
    resume_from = models.TextField(null=True, blank=True)
    completed_phases = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Not indexed alone: turn_updated_id (-updated_at, -id) serves its ranges and orderings.
    updated_at = models.DateTimeField(default=timezone.now)
    # Digest of the latest assessment's picture of this turn: a refresh rewrites only turns that changed.
    # Empty until the turn's first picture is written: a turn without one has no Phase or Intent rows yet.
    assessed_digest = models.CharField(max_length=64, blank=True, default="")
    # The fencing counter of the recovery gate: only ever grows (recovery.services.turn_claim).
    fencing_counter = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["run", "first_seq", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "turn_id"], name="turn_unique_per_run"),
            models.CheckConstraint(condition=_in("status", TURN_STATUSES), name="turn_status_valid"),
            models.CheckConstraint(condition=_in("decision", DECISIONS, null=True), name="turn_decision_valid"),
            models.CheckConstraint(condition=Q(fencing_counter__gte=0), name="turn_fencing_gte_0"),
        ]
        indexes = [
            models.Index(fields=["decision", "-updated_at"], name="turn_decision_updated"),
            models.Index(fields=["reason", "-updated_at"], name="turn_reason_updated"),
            models.Index(fields=["-updated_at", "-id"], name="turn_updated_id"),
            # A run's turn list, newest change first, without sorting all of a long run's turns.
            models.Index(fields=["run", "-updated_at", "-id"], name="turn_run_updated_id"),
            # A run's turns in journal order (the run page's grid): one page read along it, not all sorted.
            models.Index(fields=["run", "first_seq", "id"], name="turn_run_first_seq_id"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.turn_id}"


class TurnState(models.TextChoices):
    """A turn's effective state, as people see it: the engine's decision with the operator's on top.

    Computed in one place (recovery.state.turn_state_compute) and stored in TurnEffective by one writer
    (recovery.state.turn_states_refresh); every page, API answer, count, queue, finding, webhook and metric
    reads it from there, and the recovery gate computes it with the same function.
    """

    RESUMING = "resuming", "resuming"
    FINALIZING = "finalizing", "finalizing"
    APPROVED = "approved", "approved by an operator"
    COMPLETE = "complete", "complete"
    DISCARDED = "discarded", "discarded"
    HELD_EFFECT = "held_effect", "held: effect unconfirmed"
    HELD_REVIEW = "held_review", "held for review"
    HELD_JOURNAL = "held_journal", "held: the journal is at fault"
    HELD_INTEGRITY = "held_integrity", "held: stored records changed"
    BLOCKED_OPERATOR = "blocked_operator", "blocked by an operator"
    PARKED = "parked", "parked: recovery keeps failing"


GATE_STATES = ("proceed", "hold", "done")
# The effective state's columns every turn row of the API carries (journals.serializers.state_row).
STATE_ROW_FIELDS = ("state", "gate", "decision", "reason", "resume_from", "actor_name", "decided_at", "needs_evidence")


class TurnEffective(models.Model):
    """The stored effective state of a turn (see TurnState). A turn with no row is not yet assessed."""

    # Both keys are kept by statement triggers on PostgreSQL (kernel/references.py).
    turn = models.OneToOneField(
        Turn, on_delete=models.CASCADE, primary_key=True, related_name="effective", db_constraint=False
    )
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False)
    state = models.CharField(max_length=24, choices=TurnState.choices)
    gate = models.CharField(max_length=8, choices=_choices(GATE_STATES))
    # What the gate answers: the engine's decision unless an operator's decision is in force.
    decision = models.CharField(max_length=16, choices=Decision.choices)
    reason = models.CharField(max_length=64, null=True, blank=True)
    resume_from = models.TextField(null=True, blank=True)
    # The operator decision in force, if any: who, when and why.
    actor_name = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    # Live intents whose outcome nobody knows: no approval lets the turn go on without a finding for each.
    needs_evidence = models.JSONField(default=list)
    # When the turn entered this state (state and reason): how long it has been waiting.
    since = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=_in("state", tuple(TurnState.values)), name="effective_state_valid"),
            models.CheckConstraint(condition=_in("gate", GATE_STATES), name="effective_gate_valid"),
            models.CheckConstraint(condition=_in("decision", DECISIONS), name="effective_decision_valid"),
        ]
        indexes = [
            models.Index(fields=["state", "since"], name="effective_state_since"),
            models.Index(fields=["run", "state"], name="effective_run_state"),
            # The held queue, longest held first: a range of this index read in order, stopping at the page.
            models.Index(fields=["gate", "since", "turn"], name="effective_gate_since"),
            # The lists' filters on the gate's decision and reason: counted and found without the table.
            models.Index(fields=["decision", "turn"], name="effective_decision"),
            models.Index(fields=["reason", "turn"], name="effective_reason"),
            # The latest change of any state: how the overview knows its counts are still current.
            models.Index(fields=["updated_at"], name="effective_updated"),
        ]

    def __str__(self) -> str:
        return f"{self.turn_id}: {self.state}"


class Phase(models.Model):
    """A planned phase of a turn, and the live record that committed it (null while uncommitted)."""

    # Read through phase_unique_position, which leads with it. Both keys are kept by statement triggers on
    # PostgreSQL (kernel/references.py).
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="phases", db_index=False, db_constraint=False)
    position = models.IntegerField()
    name = models.TextField()
    committed = models.BooleanField(default=False)
    record = models.ForeignKey(
        "JournalRecord", null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_constraint=False
    )
    # The committing record's `at`: informational, as the writer stated it (never used for ordering).
    committed_at = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["turn", "position"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "position"], name="phase_unique_position"),
            models.CheckConstraint(condition=Q(position__gte=0), name="phase_position_gte_0"),
        ]

    def __str__(self) -> str:
        return f"{self.turn_id}:{self.position} {self.name}"


EFFECT_CLASSES: tuple[str, ...] = tuple(EffectClass.values)
RESOLUTIONS: tuple[str, ...] = tuple(Resolution.values)
# The merged readbacks of an intent's latest dispatch (the engine's ``merge_outcome``): a definitive one, or
# ``unknown``, or ``conflicting`` when two definitive readbacks disagree (not settled: fail closed).
OUTCOMES = ("succeeded", "failed", "unknown", "conflicting")


class Intent(models.Model):
    """An intent of a turn as the latest assessment sees it (described by its latest dispatch)."""

    # Read through intent_unique_per_turn, which leads with it; kept by statement triggers on PostgreSQL
    # (kernel/references.py).
    turn = models.ForeignKey(
        Turn, on_delete=models.CASCADE, related_name="intents", db_index=False, db_constraint=False
    )
    intent_id = models.CharField(max_length=ID_MAX)
    effect_class = models.CharField(max_length=16, choices=EffectClass.choices)
    idempotency_key = models.TextField(null=True, blank=True)
    resolution = models.CharField(max_length=16, choices=Resolution.choices)
    branch = models.IntegerField(default=0)
    live = models.BooleanField(default=True)
    dispatches = models.IntegerField(default=1)
    outcome = models.CharField(max_length=16, choices=_choices(OUTCOMES), null=True, blank=True)
    position = models.IntegerField(default=0)

    class Meta:
        ordering = ["turn", "position"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "intent_id"], name="intent_unique_per_turn"),
            models.CheckConstraint(condition=_in("effect_class", EFFECT_CLASSES), name="intent_effect_class_valid"),
            models.CheckConstraint(condition=_in("resolution", RESOLUTIONS), name="intent_resolution_valid"),
            models.CheckConstraint(condition=_in("outcome", OUTCOMES, null=True), name="intent_outcome_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.intent_id} ({self.effect_class}, {self.resolution})"


class JournalRecord(AppendOnlyModel):
    """One line of a run's journal, exactly as received. Append-only (also enforced by a trigger)."""

    # On PostgreSQL the reference to the run is kept by triggers checking each statement, not by a
    # FOREIGN KEY constraint checking each row (journals/migrations/0004_record_run_statement_check.py);
    # the constraint checks every record of a batch again at COMMIT, one probe each, where a statement's
    # trigger checks the batch's runs once (docs/perf/2026-12-02-dialect.md). SQLite keeps its constraint.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="records", db_constraint=False)
    # Per-run ingest order (1, 2, 3, ...): file order across branches, which the engine depends on.
    seq = models.BigIntegerField()
    branch = models.IntegerField()
    lsn = models.BigIntegerField()
    # Envelope fields copied out for queries; null when the record's own value is absent or unusable
    # (the bytes still say what it was, and the assessment reports it).
    kind = models.CharField(max_length=64, null=True, blank=True)
    v = models.IntegerField(null=True, blank=True)
    turn = models.CharField(max_length=ID_MAX, null=True, blank=True)
    digest = models.CharField(max_length=64)
    line = models.BinaryField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="record_unique_seq"),
            models.UniqueConstraint(fields=["run", "branch", "lsn"], name="record_unique_branch_lsn"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="record_seq_gte_1"),
            models.CheckConstraint(condition=Q(branch__gte=0), name="record_branch_gte_0"),
            models.CheckConstraint(condition=Q(lsn__gte=0), name="record_lsn_gte_0"),
        ]
        indexes = [models.Index(fields=["run", "turn", "seq"], name="record_run_turn_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} ({self.branch}:{self.lsn})"


class Checkpoint(models.Model):
    """A checkpoint record's claims (checked by the assessment: `checkpoint_mismatch`)."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="checkpoints")
    record = models.OneToOneField(JournalRecord, on_delete=models.PROTECT, related_name="checkpoint")
    branch = models.IntegerField()
    lsn = models.BigIntegerField()
    covers_lsn = models.BigIntegerField(null=True, blank=True)
    state_digest = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        ordering = ["run", "branch", "lsn"]

    def __str__(self) -> str:
        return f"checkpoint {self.run_id} {self.branch}:{self.lsn}"


# --- the assessment queue's state: at most one pending assessment per run ------------------------------
#
# The flag says the run's committed prefix moved and its assessment is owed. The broker carries messages;
# this row is the truth about what is owed. Ingest raises ``pending`` in the same transaction that stores a
# batch (compare-and-set: only the batch that flips it announces ``prefix_moved`` on commit, and recovery
# publishes a task), the task lowers it before it reads the prefix and holds a lease on it while it runs, and
# the sweep (audits/checks.py) republishes a flag left raised with no message behind it, or a lease that ran
# out (its worker died). journals/assessment_flag.py holds every write of it.

PENDING_OUTCOMES = ("stored", "unchanged", "superseded", "missing")


class PendingAssessment(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="pending_assessment")
    pending = models.BooleanField(default=False)
    # When the flag was last raised, and the run's last seq then (the sweep's age and the finding's facts).
    requested_at = models.DateTimeField(null=True, blank=True)
    requested_seq = models.BigIntegerField(default=0)
    # When a message was last handed to the broker (after commit); older than requested_at while the flag
    # is raised means the enqueue never happened (a crash between commit and publish).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    enqueues = models.BigIntegerField(default=0)
    # The latest task run: when it lowered the flag, when it finished and what it did.
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, blank=True, default="")
    # The task that lowered the flag holds it until this deadline, renewed while it runs and never past its
    # hard time limit; cleared when it finishes. A deadline in the past means the task is gone (its worker
    # was killed, its message lost with the broker), and the sweep asks for the assessment again.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Who holds the lease: the task's id, so that the broker's redelivery of the same message takes over.
    lease_holder = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(outcome__in=("", *PENDING_OUTCOMES)), name="pendingassessment_outcome_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["pending", "requested_at"], name="pendingassessment_sweep"),
            models.Index(fields=["lease_expires_at"], name="pendingassessment_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {'pending' if self.pending else 'idle'}"
