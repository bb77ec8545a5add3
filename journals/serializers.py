"""Shapes of the journal API. Record content reaches them only through selectors.record_public
(redacted, contract section 8)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson
from django.core.exceptions import ObjectDoesNotExist
from rest_framework import serializers

from journals.intake import IngestResult
from journals.models import (
    GATE_STATES,
    STATE_ROW_FIELDS,
    TURN_ASSESSED_FIELDS,
    Branch,
    Intent,
    Phase,
    Run,
    RunStatus,
    Turn,
    TurnState,
)
from journals.remedies import remedy_steps


class IngestBranchSerializer(serializers.Serializer[Any]):
    branch = serializers.IntegerField()
    committed_lsn = serializers.IntegerField(help_text="Ack cursor: every lsn 0..committed_lsn is stored (-1: none).")
    last_lsn = serializers.IntegerField(help_text="Highest lsn stored on the branch (-1: none).")


class IngestViolationSerializer(serializers.Serializer[Any]):
    code = serializers.CharField()
    line = serializers.IntegerField()
    branch = serializers.IntegerField()
    lsn = serializers.IntegerField()
    detail = serializers.CharField()


class IngestResultSerializer(serializers.Serializer[Any]):
    run = serializers.CharField()
    stored = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField()
    branches = IngestBranchSerializer(many=True)
    violations = IngestViolationSerializer(
        many=True,
        help_text=(
            "The run-level faults the stored batch brought in, as far as the batch and the stored heads show "
            "them (lsn_gap, chain_broken, fork_invalid, record_invalid, kind_unknown, schema_unsupported); "
            "empty when none. Only a batch sent without LoopX-Expect is stored with faults."
        ),
    )

    def to_representation(self, instance: IngestResult) -> dict[str, Any]:
        return {
            "run": instance.run.run_id,
            "stored": instance.stored,
            "duplicates": instance.duplicates,
            "first_seq": instance.first_seq,
            "last_seq": instance.last_seq,
            "branches": [
                {"branch": b.number, "committed_lsn": b.committed_lsn, "last_lsn": b.last_lsn}
                for b in instance.branches
            ],
            "violations": [fault.to_dict() for fault in instance.violations],
        }


class IngestConflictSerializer(serializers.Serializer[Any]):
    """A batch refused whole with 409 (nothing stored). `lsn_conflict`: branch, lsn and both digests;
    `offset_mismatch`: branch, expected and stored lsn (LoopX-Expect); `fenced`: turn, the token sent and the
    turn's current one; `fencing_required`: turn (LoopX-Fencing)."""

    error = serializers.ChoiceField(choices=["lsn_conflict", "offset_mismatch", "fenced", "fencing_required"])
    detail = serializers.CharField()
    line = serializers.IntegerField(allow_null=True)
    branch = serializers.IntegerField(required=False)
    lsn = serializers.IntegerField(required=False)
    stored_digest = serializers.CharField(required=False)
    received_digest = serializers.CharField(required=False)
    expected = serializers.IntegerField(required=False)
    stored = serializers.IntegerField(required=False)
    turn = serializers.CharField(required=False)
    token = serializers.IntegerField(required=False)
    current = serializers.IntegerField(required=False)


class RunSerializer(serializers.ModelSerializer[Run]):
    status = serializers.ChoiceField(
        choices=RunStatus.choices,
        source="status_shown",
        read_only=True,
        help_text=(
            "blocked (the journal is at fault), needs_attention (a turn is held), running (turns go on, or records "
            "wait for their assessment) or done (every turn ended): docs/state.md."
        ),
    )

    class Meta:
        model = Run
        fields = [
            "run_id",
            "status",
            "created_at",
            "updated_at",
            "record_count",
            "last_seq",
            "prefix_digest",
            "live_branch",
            "blocked_reason",
            "assessed_seq",
        ]


class BranchSerializer(serializers.ModelSerializer[Branch]):
    branch = serializers.IntegerField(source="number")

    class Meta:
        model = Branch
        fields = [
            "branch",
            "parent",
            "from_lsn",
            "fork_lsn",
            "discarded_from",
            "last_lsn",
            "committed_lsn",
            "record_count",
            "live",
        ]


class RunDetailSerializer(RunSerializer):
    branches = BranchSerializer(many=True, read_only=True)
    decisions = serializers.SerializerMethodField(help_text="Turns by the engine's decision.")
    states = serializers.SerializerMethodField(help_text="Turns by effective state (docs/state.md).")

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "branches", "decisions", "states"]

    def get_decisions(self, run: Run) -> dict[str, int]:
        return dict(self.context.get("decisions", {}))

    def get_states(self, run: Run) -> dict[str, int]:
        return dict(self.context.get("states", {}))


def iso(value: datetime | None) -> str | None:
    """DRF's datetime format (ISO 8601, UTC as 'Z'), without the field machinery."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class TurnStateSerializer(serializers.Serializer[Any]):
    """The turn's effective state: what the recovery gate answers and every page shows (docs/state.md).
    Null before the turn's first assessment."""

    state = serializers.ChoiceField(choices=TurnState.choices)
    # A declared field: DRF's metaclass takes it out of the class, where the stubs see Field.label.
    label = serializers.CharField()  # type: ignore[assignment]
    gate = serializers.ChoiceField(choices=list(GATE_STATES))
    decision = serializers.CharField()
    reason = serializers.CharField(allow_null=True)
    resume_from = serializers.CharField(allow_null=True)
    operator = serializers.CharField(allow_null=True, help_text="Who decided on top of the engine, if anyone.")
    decided_at = serializers.DateTimeField(allow_null=True)
    remedy = serializers.ListField(
        child=serializers.CharField(),
        help_text="What lifts the hold, step by step, in order (journals/remedies.py); empty when not held.",
    )

    # None renders as null (a turn not yet assessed); the stubs only allow a dict.
    def to_representation(self, effective: Any) -> dict[str, Any] | None:  # type: ignore[override]
        return state_row({f: getattr(effective, f) for f in STATE_ROW_FIELDS}, prefix="")


def state_row(row: Mapping[str, Any], prefix: str = "effective_") -> dict[str, Any] | None:
    """The ``state`` object of a turn row (its TurnEffective columns joined under ``prefix``)."""
    state = row.get(prefix + "state")
    if state is None:
        return None
    return {
        "state": state,
        "label": str(TurnState(state).label),
        "gate": row[prefix + "gate"],
        "decision": row[prefix + "decision"],
        "reason": row[prefix + "reason"],
        "resume_from": row[prefix + "resume_from"],
        "operator": row[prefix + "actor_name"] or None,
        "decided_at": iso(row[prefix + "decided_at"]),
        "remedy": _remedy(state, row[prefix + "gate"], row[prefix + "reason"], row[prefix + "needs_evidence"]),
    }


def _remedy(state: str, gate: str, reason: str | None, needs: Any) -> list[str]:
    if gate != "hold":
        return []
    if isinstance(needs, str):  # a raw cursor's JSON column arrives as its text
        needs = orjson.loads(needs)
    intents = [str(i) for i in needs] if isinstance(needs, list) else []
    return remedy_steps(state=state, reason=reason, needs_evidence=intents)


def _state_of(turn: Turn) -> dict[str, Any] | None:
    try:
        effective = turn.effective
    except ObjectDoesNotExist:
        return None
    return state_row({f: getattr(effective, f) for f in STATE_ROW_FIELDS}, prefix="")


class TurnSerializer(serializers.ModelSerializer[Turn]):
    """Fields are declared for the schema; ``to_representation`` builds the same dict directly, because
    lists render 50 of these per page and DRF's per-field machinery would be most of a page's time
    (benchmarks/bench_reads.py). tests/api/test_projection.py checks both agree."""

    run = serializers.CharField(source="run.run_id")
    turn = serializers.CharField(source="turn_id")
    plan = serializers.ListField(child=serializers.CharField())
    completed_phases = serializers.ListField(child=serializers.CharField())
    state = TurnStateSerializer(source="effective", allow_null=True, read_only=True)

    @staticmethod
    def row(row: Mapping[str, Any]) -> dict[str, Any]:
        """The same shape from a selectors.turn_rows row (a dict), for list pages."""
        return {
            "run": row["run_key"],
            "turn": row["turn_id"],
            "lineage": row["lineage"],
            "branch": row["branch"],
            "plan": orjson.loads(row["plan_json"]),
            "status": row["status"],
            "decision": row["decision"],
            "reason": row["reason"],
            "resume_from": row["resume_from"],
            "completed_phases": orjson.loads(row["completed_json"]),
            "state": state_row(row),
            "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"]),
        }

    def to_representation(self, turn: Turn) -> dict[str, Any]:
        return {
            "run": turn.run.run_id,
            "turn": turn.turn_id,
            "lineage": turn.lineage,
            "branch": turn.branch,
            "plan": list(turn.plan),
            "status": turn.status,
            "decision": turn.decision,
            "reason": turn.reason,
            "resume_from": turn.resume_from,
            "completed_phases": list(turn.completed_phases),
            "state": _state_of(turn),
            "created_at": iso(turn.created_at),
            "updated_at": iso(turn.updated_at),
        }

    class Meta:
        model = Turn
        fields = ["run", "turn", *TURN_ASSESSED_FIELDS, "state", "created_at", "updated_at"]


class PhaseSerializer(serializers.ModelSerializer[Phase]):
    record = serializers.SerializerMethodField()

    class Meta:
        model = Phase
        fields = ["position", "name", "committed", "committed_at", "record"]

    def get_record(self, phase: Phase) -> dict[str, int] | None:
        record = phase.record
        return None if record is None else {"seq": record.seq, "branch": record.branch, "lsn": record.lsn}


class IntentSerializer(serializers.ModelSerializer[Intent]):
    intent = serializers.CharField(source="intent_id")

    class Meta:
        model = Intent
        fields = ["intent", "effect_class", "idempotency_key", "resolution", "branch", "live", "dispatches", "outcome"]


class TurnDetailSerializer(TurnSerializer):
    phases = PhaseSerializer(many=True, read_only=True)
    intents = IntentSerializer(many=True, read_only=True)

    def to_representation(self, turn: Turn) -> dict[str, Any]:
        return {
            **super().to_representation(turn),
            "phases": [
                {
                    "position": p.position,
                    "name": p.name,
                    "committed": p.committed,
                    "committed_at": p.committed_at,
                    "record": None
                    if p.record is None
                    else {"seq": p.record.seq, "branch": p.record.branch, "lsn": p.record.lsn},
                }
                for p in turn.phases.all()
            ],
            "intents": [
                {
                    "intent": i.intent_id,
                    "effect_class": i.effect_class,
                    "idempotency_key": i.idempotency_key,
                    "resolution": i.resolution,
                    "branch": i.branch,
                    "live": i.live,
                    "dispatches": i.dispatches,
                    "outcome": i.outcome,
                }
                for i in turn.intents.all()
            ],
        }

    class Meta(TurnSerializer.Meta):
        fields = [*TurnSerializer.Meta.fields, "phases", "intents"]


class RecordSerializer(serializers.Serializer[Any]):
    seq = serializers.IntegerField()
    branch = serializers.IntegerField()
    lsn = serializers.IntegerField()
    kind = serializers.CharField(allow_null=True)
    v = serializers.IntegerField(allow_null=True)
    turn = serializers.CharField(allow_null=True)
    digest = serializers.CharField()
    record = serializers.JSONField(allow_null=True, help_text="The record with secret fields redacted.")
