"""Recovery audits: what each recovery planned versus what actually happened (a model module of the
`recovery` app, imported by recovery/models.py).

Every model here is append-only (save/delete/queryset guards, and a PostgreSQL trigger from the
migration). A recovery audit's closing is its own row (RecoveryAuditClosure) so that the audit row is
never updated.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from journals.models import ID_MAX, Run, Turn
from kernel.appendonly import AppendOnlyModel


def _in(field: str, values: tuple[str, ...]) -> Q:
    return Q(**{f"{field}__in": values})


ACTION_KINDS = ("phase", "intent", "terminal")


class RecoveryAudit(AppendOnlyModel):
    """One recovery attempt of a turn under a claim: the plan the gate handed out."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="recovery_audits")
    turn = models.ForeignKey(Turn, on_delete=models.PROTECT, related_name="recovery_audits")
    claim = models.ForeignKey("recovery.TurnClaim", on_delete=models.PROTECT, related_name="audits")
    fencing_token = models.BigIntegerField()
    worker_id = models.CharField(max_length=ID_MAX)
    assessment = models.ForeignKey("recovery.Assessment", on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=16)
    resume_from = models.TextField(null=True, blank=True)
    # The turn's committed progress when the attempt opened; attempts without progress are counted.
    progress_key = models.TextField()
    attempt = models.IntegerField()
    # [{"kind": "phase"|"intent"|"terminal", "target": str, ...}] in the order they should happen.
    planned = models.JSONField(default=list)
    opened_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [models.CheckConstraint(condition=Q(attempt__gte=1), name="recoveryaudit_attempt_gte_1")]


class RecoveryAuditAction(AppendOnlyModel):
    """An action the runtime reports it actually took during a recovery."""

    audit = models.ForeignKey(RecoveryAudit, on_delete=models.PROTECT, related_name="actions")
    position = models.IntegerField()
    kind = models.CharField(max_length=16, choices=[(k, k) for k in ACTION_KINDS])
    target = models.CharField(max_length=ID_MAX)
    detail = models.JSONField(default=dict)
    planned = models.BooleanField()
    reported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["audit", "position"]
        constraints = [
            models.UniqueConstraint(fields=["audit", "position"], name="recoveryauditaction_unique_position"),
            models.CheckConstraint(condition=_in("kind", ACTION_KINDS), name="recoveryauditaction_kind_valid"),
        ]


DIVERGENCE_CODES = ("unplanned_action", "repeated_action", "planned_action_missing")


class RecoveryDivergence(AppendOnlyModel):
    """A typed difference between the plan and what was done."""

    audit = models.ForeignKey(RecoveryAudit, on_delete=models.PROTECT, related_name="divergences")
    code = models.CharField(max_length=32, choices=[(c, c.replace("_", " ")) for c in DIVERGENCE_CODES])
    kind = models.CharField(max_length=16)
    target = models.CharField(max_length=ID_MAX)
    action = models.ForeignKey(RecoveryAuditAction, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    detail = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["audit", "id"]
        constraints = [
            models.CheckConstraint(condition=_in("code", DIVERGENCE_CODES), name="recoverydivergence_code_valid")
        ]


class RecoveryAuditClosure(AppendOnlyModel):
    """The audit's close event (one per audit): the audit row itself is never updated."""

    audit = models.OneToOneField(RecoveryAudit, on_delete=models.PROTECT, related_name="closure")
    closed_at = models.DateTimeField(default=timezone.now)
    note = models.TextField(blank=True, default="")
    divergence_count = models.IntegerField(default=0)

    class Meta:
        ordering = ["-closed_at"]
