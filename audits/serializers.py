"""Shapes of the audit API: operator actions, and recoveries with planned and actual side by side."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from recovery.recovery_audits.models import ACTION_KINDS, RecoveryAudit, RecoveryAuditAction, RecoveryDivergence
from trail.models import OperatorAction


class OperatorActionSerializer(serializers.ModelSerializer[OperatorAction]):
    actor = serializers.CharField(source="actor_name")
    run = serializers.CharField(source="run.run_id", allow_null=True, default=None)
    turn = serializers.CharField(source="turn.turn_id", allow_null=True, default=None)

    class Meta:
        model = OperatorAction
        fields = ["id", "seq", "actor", "via", "kind", "run", "turn", "reason", "before", "after", "created_at",
                  "prev_digest", "digest"]


class AuditActionSerializer(serializers.ModelSerializer[RecoveryAuditAction]):
    class Meta:
        model = RecoveryAuditAction
        fields = ["position", "kind", "target", "detail", "planned", "reported_at"]


class DivergenceSerializer(serializers.ModelSerializer[RecoveryDivergence]):
    action = serializers.IntegerField(source="action.position", allow_null=True, default=None)

    class Meta:
        model = RecoveryDivergence
        fields = ["code", "kind", "target", "action", "detail", "created_at"]


class RecoveryAuditSerializer(serializers.ModelSerializer[RecoveryAudit]):
    run = serializers.CharField(source="run.run_id")
    turn = serializers.CharField(source="turn.turn_id")
    planned = serializers.SerializerMethodField()
    actual = AuditActionSerializer(source="actions", many=True, read_only=True)
    divergences = DivergenceSerializer(many=True, read_only=True)
    closed = serializers.SerializerMethodField()
    closed_at = serializers.SerializerMethodField()
    assessment = serializers.IntegerField(source="assessment_id")

    class Meta:
        model = RecoveryAudit
        fields = [
            "id",
            "run",
            "turn",
            "worker_id",
            "fencing_token",
            "attempt",
            "decision",
            "resume_from",
            "assessment",
            "opened_at",
            "closed",
            "closed_at",
            "planned",
            "actual",
            "divergences",
        ]

    def _closure(self, audit: RecoveryAudit) -> Any:
        try:
            return audit.closure
        except RecoveryAudit.closure.RelatedObjectDoesNotExist:
            return None

    def get_planned(self, audit: RecoveryAudit) -> list[dict[str, Any]]:
        done = {(a.kind, a.target) for a in audit.actions.all()}
        return [{**p, "reported": (p["kind"], p["target"]) in done} for p in audit.planned]

    def get_closed(self, audit: RecoveryAudit) -> bool:
        return self._closure(audit) is not None

    def get_closed_at(self, audit: RecoveryAudit) -> str | None:
        closure = self._closure(audit)
        return closure.closed_at.isoformat() if closure else None


class ActionRequestSerializer(serializers.Serializer[Any]):
    fencing_token = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    kind = serializers.ChoiceField(choices=list(ACTION_KINDS))
    target = serializers.CharField(max_length=200)
    detail = serializers.DictField(required=False)


class CloseRequestSerializer(serializers.Serializer[Any]):
    fencing_token = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    note = serializers.CharField(max_length=4000, required=False, allow_blank=True)


class OpenRequestSerializer(serializers.Serializer[Any]):
    fencing_token = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
