"""Shapes of the recovery API: assessments, the gate's decision, claims, approvals and evidence."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers

from recovery.models import FINDINGS, Assessment, GateDecision, OperatorEvidence, TurnClaim
from recovery.output import assessment_output_read
from recovery.selectors import GateView
from recovery.services import BULK_ACTIONS
from recovery.state import FILTER_CHOICES, FILTER_NAMES, state_version


class AssessmentSummarySerializer(serializers.ModelSerializer[Assessment]):
    id = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="null in a gate answer folded in memory (`pending`): not stored."
    )
    run = serializers.CharField(source="run.run_id")

    class Meta:
        model = Assessment
        fields = [
            "id",
            "run",
            "prefix_records",
            "prefix_last_seq",
            "prefix_digest",
            "evidence_digest",
            "engine_version",
            "projection_version",
            "live_branch",
            "blocked_reason",
            "created_at",
            "turn_count",
            "rows_written",
            "output_digest",
            "from_snapshot",
            "compacted_at",
        ]


class AssessmentOutputField(serializers.JSONField):
    """The output as readers get it, however it is stored (recovery/output.py)."""

    def get_attribute(self, instance: Assessment) -> Any:
        return assessment_output_read(assessment=instance)


class AssessmentSerializer(AssessmentSummarySerializer):
    output = AssessmentOutputField(
        read_only=True,
        help_text=(
            "The engine's stable JSON (assess_journal --json shape); `{\"compacted\": true}` once a newer "
            "assessment superseded it (`compacted_at`)."
        ),
    )
    repair = serializers.SerializerMethodField(
        help_text="The journal repair this assessment was made after (docs/repair.md), or null."
    )

    class Meta(AssessmentSummarySerializer.Meta):
        fields = [*AssessmentSummarySerializer.Meta.fields, "repair", "output"]

    def get_repair(self, obj: Assessment) -> dict[str, Any] | None:
        output = obj.output if isinstance(obj.output, dict) else {}
        repair = output.get("repair")
        return repair if isinstance(repair, dict) else None


class GateOperatorSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=["approve", "block", "park"])
    actor = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class GateEngineSerializer(serializers.Serializer[Any]):
    decision = serializers.CharField()
    reason = serializers.CharField(allow_null=True)
    reason_line = serializers.IntegerField(allow_null=True)
    resume_from = serializers.CharField(allow_null=True)
    completed_phases = serializers.ListField(child=serializers.CharField())
    terminal = serializers.CharField(allow_null=True)


class GateClaimSerializer(serializers.Serializer[Any]):
    worker_id = serializers.CharField()
    expires_at = serializers.DateTimeField()


class GateRecoverySerializer(serializers.Serializer[Any]):
    attempts = serializers.IntegerField(help_text="Recoveries opened in a row without the turn's progress moving.")
    max_attempts = serializers.IntegerField()
    parked = serializers.BooleanField()


class GateIntentSerializer(serializers.Serializer[Any]):
    intent = serializers.CharField()
    effect_class = serializers.CharField()
    resolution = serializers.CharField()
    live = serializers.BooleanField()
    branch = serializers.IntegerField()
    outcome = serializers.CharField(allow_null=True)


class PlannedActionSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=["phase", "intent", "terminal"])
    target = serializers.CharField()
    resolution = serializers.CharField(required=False)
    effect_class = serializers.CharField(required=False)
    idempotency_key = serializers.CharField(required=False, allow_null=True)


class GateOffsetMismatchSerializer(serializers.Serializer[Any]):
    """``?expect`` named a high-water the store does not hold (contract section 6: `offset_mismatch`)."""

    branch = serializers.IntegerField()
    expected = serializers.IntegerField()
    stored = serializers.IntegerField(help_text="The branch's ack cursor: every lsn 0..stored is stored (-1: none).")
    detail = serializers.CharField()


class GateSerializer(serializers.Serializer[Any]):
    """The gate: `state` is what a runtime may do now (`proceed`, `hold`, or `done`: nothing to do)."""

    run = serializers.CharField()
    turn = serializers.CharField()
    state = serializers.ChoiceField(choices=["proceed", "hold", "done"])
    decision = serializers.CharField()
    reason = serializers.CharField(allow_null=True)
    resume_from = serializers.CharField(allow_null=True)
    approved = serializers.BooleanField()
    effective = serializers.JSONField(
        allow_null=True, help_text="The turn's effective state, as every page shows it (docs/state.md)."
    )
    state_version = serializers.CharField(
        help_text=(
            "The version of `effective` (docs/state.md): also the answer's `ETag`. Send it back as `If-Match` "
            "with an approval or a block to have it refused (409 `state_changed`) if the turn moved since."
        )
    )
    engine = GateEngineSerializer()
    operator = GateOperatorSerializer(allow_null=True)
    claim = GateClaimSerializer(allow_null=True)
    recovery = GateRecoverySerializer()
    planned = PlannedActionSerializer(many=True)
    intents = GateIntentSerializer(many=True)
    assessment = AssessmentSummarySerializer()
    pending = serializers.BooleanField(
        help_text=(
            "true: records arrived after the stored assessment; this answer was folded from the whole committed "
            "prefix for this request and stored nowhere (`assessment.id` is null until the worker stores it)."
        )
    )
    offset_mismatch = GateOffsetMismatchSerializer(allow_null=True)

    def to_representation(self, view: GateView) -> dict[str, Any]:
        row, op, claim = view.row, view.operator, view.claim
        mismatch = view.offset_mismatch
        return {
            "run": view.turn.run.run_id,
            "turn": view.turn.turn_id,
            "state": view.gate,
            "decision": view.decision,
            "reason": view.reason,
            "resume_from": view.resume_from,
            "approved": view.approved,
            "effective": view.value.as_dict() if view.value is not None else None,
            "state_version": state_version(view.value),
            "engine": {
                "decision": row.decision,
                "reason": row.reason,
                "reason_line": row.reason_line,
                "resume_from": row.resume_from,
                "completed_phases": list(row.completed_phases),
                "terminal": row.terminal,
            },
            "operator": None
            if op is None
            else {"kind": op.kind, "actor": op.actor_name, "reason": op.reason, "at": op.created_at.isoformat()},
            # Never the holder's fencing token: it is handed to the claimer alone.
            "claim": None
            if claim is None
            else {"worker_id": claim.worker_id, "expires_at": claim.expires_at.isoformat()},
            "recovery": {
                "attempts": view.attempts,
                "max_attempts": view.max_attempts,
                "parked": op is not None and op.kind == "park",
            },
            "planned": view.planned,
            "intents": [
                {
                    "intent": i.intent_id,
                    "effect_class": i.effect_class,
                    "resolution": i.resolution,
                    "live": i.live,
                    "branch": i.branch,
                    "outcome": i.outcome,
                }
                for i in view.intents
            ],
            "assessment": AssessmentSummarySerializer(view.assessment).data,
            "pending": view.pending,
            "offset_mismatch": None
            if mismatch is None
            else {
                "branch": mismatch.branch,
                "expected": mismatch.expected,
                "stored": mismatch.stored,
                "detail": mismatch.detail,
            },
        }


class ClaimRequestSerializer(serializers.Serializer[Any]):
    worker_id = serializers.CharField(max_length=200)


class ClaimSerializer(serializers.ModelSerializer[TurnClaim]):
    turn = serializers.CharField(source="turn.turn_id")
    lease_seconds = serializers.SerializerMethodField(
        help_text=(
            "The lease granted, in seconds from the moment the server answered (`expires_at`). A runtime "
            "counts it from before it sent the request, on its own monotonic clock, and renews well before."
        )
    )

    class Meta:
        model = TurnClaim
        fields = ["turn", "worker_id", "fencing_token", "acquired_at", "expires_at", "released_at", "lease_seconds"]

    def get_lease_seconds(self, claim: TurnClaim) -> int:
        return int(settings.LOOPX_CLAIM_LEASE_SECONDS)


class FencingRequestSerializer(serializers.Serializer[Any]):
    fencing_token = serializers.IntegerField(min_value=1, max_value=2**63 - 1)


class ApproveRequestSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=4000)
    evidence = serializers.DictField(
        child=serializers.ChoiceField(choices=list(FINDINGS)),
        required=False,
        help_text="Intent id -> happened / not_happened (needed for an indeterminate unsafe effect).",
    )


class BlockRequestSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=4000)


class EvidenceSerializer(serializers.ModelSerializer[OperatorEvidence]):
    intent = serializers.CharField(source="intent_id")
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = OperatorEvidence
        fields = ["intent", "finding", "dispatch", "actor", "reason", "created_at"]


class GateDecisionSerializer(serializers.ModelSerializer[GateDecision]):
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = GateDecision
        fields = [
            "id",
            "kind",
            "actor",
            "reason",
            "engine_decision",
            "engine_reason",
            "engine_reason_line",
            "created_at",
        ]


class BulkFilterSerializer(serializers.Serializer[Any]):
    """The turns list's filter: the same names and values as the console's (recovery.state.FILTER_NAMES)."""

    q = serializers.CharField(required=False, max_length=200, help_text="Turn, run or lineage contains.")
    state = serializers.ChoiceField(required=False, choices=FILTER_CHOICES["state"])
    decision = serializers.ChoiceField(required=False, choices=FILTER_CHOICES["decision"])
    reason = serializers.ChoiceField(required=False, choices=FILTER_CHOICES["reason"])
    status = serializers.ChoiceField(required=False, choices=FILTER_CHOICES["status"])
    run = serializers.CharField(required=False, max_length=200)
    age = serializers.ChoiceField(required=False, choices=FILTER_CHOICES["age"])


class BulkRequestSerializer(serializers.Serializer[Any]):
    """A bulk decision over a filter (at least one name); every turn goes through the single decision's
    service, in its own transaction."""

    action = serializers.ChoiceField(choices=list(BULK_ACTIONS))
    reason = serializers.CharField(max_length=4000, help_text="Why: recorded on every turn's decision.")
    filter = BulkFilterSerializer()
    expected = serializers.IntegerField(
        required=False, min_value=0, help_text="The count you confirmed: refused (409) when the filter now differs."
    )

    def filters(self) -> dict[str, Any]:
        given = dict(self.validated_data["filter"])
        return {name: given[name] for name in FILTER_NAMES if given.get(name)}


class BulkTurnSerializer(serializers.Serializer[Any]):
    run = serializers.CharField()
    turn = serializers.CharField()


class BulkLeftSerializer(BulkTurnSerializer):
    error = serializers.CharField(help_text="The refusal's code, as the single decision gives it.")
    detail = serializers.CharField()


class BulkResultSerializer(serializers.Serializer[Any]):
    action = serializers.CharField()
    done = BulkTurnSerializer(many=True)
    left = BulkLeftSerializer(many=True, help_text="Turns left alone, each with the service's refusal.")

    def to_representation(self, outcome: Any) -> dict[str, Any]:
        return {
            "action": outcome.action,
            "done": [{"run": t.run.run_id, "turn": t.turn_id} for t in outcome.done],
            "left": [
                {"run": t.run.run_id, "turn": t.turn_id, "error": err.code, "detail": err.detail}
                for t, err in outcome.left
            ],
        }


class AssignRequestSerializer(serializers.Serializer[Any]):
    assignee = serializers.CharField(
        max_length=150, help_text="The username of the operator who reviews the turn (your own: take it)."
    )
    reason = serializers.CharField(max_length=4000, required=False, allow_blank=True)


class UnassignRequestSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=4000, required=False, allow_blank=True)


class AssignmentSerializer(serializers.Serializer[Any]):
    """Who reviews the turn now (``assignee`` null: nobody)."""

    run = serializers.CharField()
    turn = serializers.CharField()
    assignee = serializers.CharField(allow_null=True)
    assigned_by = serializers.CharField(allow_null=True)
    assigned_at = serializers.DateTimeField(allow_null=True)
