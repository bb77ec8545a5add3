"""The operator trail: who did what, when and why, in one tamper-evident chain.

OperatorAction is append-only (save/delete/queryset guards, and a PostgreSQL trigger from the migration).
TrailHead is the chain's single head row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from journals.models import Run, Turn
from kernel.appendonly import AppendOnlyModel
from kernel.via import VIA


def _in(field: str, values: tuple[str, ...]) -> Q:
    return Q(**{f"{field}__in": values})


OPERATOR_ACTION_KINDS = (
    "turn_approve",
    "turn_block",
    "turn_park",
    "evidence_record",
    "api_token_create",
    "api_token_revoke",
    # An operator acknowledging or resolving a finding of the scheduled audits.
    "finding_acknowledge",
    "finding_resolve",
    # An admin's edit of a blocked turn's annotations (lineage repair, notes, block reason).
    "turn_edit",
    # Retention removed a completed run after exporting it to a verified package (system actor).
    "retention_remove",
    # The rest of the trail: every state-changing act of a person or a token (docs/trail.md).
    "run_export",
    "package_upload",
    "package_requeue",
    "webhook_create",
    "webhook_change",
    "webhook_delete",
    "delivery_resend",
    "schedule_create",
    "schedule_change",
    "schedule_delete",
    "user_create",
    "user_change",
    "user_delete",
    "role_create",
    "role_change",
    "role_delete",
    "journal_repair",
    "trail_export",
    # An operator's save of an effect map (a new version) and its attachment to a source (imports).
    "effect_map_create",
    "effect_map_update",
    "effect_map_attach",
    # A history of another runtime uploaded, and its conversion queued again (imports).
    "history_upload",
    "history_requeue",
    # A team (its members and run prefixes: who sees which runs) added, changed or removed in the admin.
    "team_create",
    "team_change",
    "team_delete",
    # An operator's review assignment of a turn (who is looking at it) given or released.
    "turn_assign",
    "turn_unassign",
    # A team's notification channel or rule added, changed or removed (notifications.services).
    "notification_channel_change",
    "notification_rule_change",
)
# How the act reached the service (kernel/via.py): a filter of the trail, and part of the row's digest.
# The digest the first row of the trail chains from.
TRAIL_GENESIS = "0" * 64


class OperatorAction(AppendOnlyModel):
    """Who did what, when and why, with the state before and after (redacted JSON).

    Tamper-evident: rows form one chain in ``seq`` order, each carrying the digest of the row before it
    (``prev_digest``) and its own (``digest``, over every column it shows); TrailHead holds the last one.
    trail/chain.py computes and re-verifies them.
    """

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    # A snapshot of the actor's name: the audit must read the same after a user is renamed.
    actor_name = models.CharField(max_length=150)
    kind = models.CharField(max_length=32, choices=[(k, k.replace("_", " ")) for k in OPERATOR_ACTION_KINDS])
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="operator_actions")
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.PROTECT, related_name="operator_actions")
    reason = models.TextField()
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    via = models.CharField(max_length=16, choices=[(v, v) for v in VIA], default="system")
    # The trail's chain: 1, 2, 3, ... with no gap; the previous row's digest (TRAIL_GENESIS for the first).
    seq = models.BigIntegerField(unique=True)
    prev_digest = models.CharField(max_length=64)
    digest = models.CharField(max_length=64)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=_in("kind", OPERATOR_ACTION_KINDS), name="operatoraction_kind_valid"),
            models.CheckConstraint(condition=_in("via", VIA), name="operatoraction_via_valid"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="operatoraction_seq_gte_1"),
        ]
        indexes = [models.Index(fields=["kind", "-created_at"], name="operatoraction_kind_created")]


class TrailHead(models.Model):
    """The one row (pk 1) every trail writer locks FOR UPDATE: the last row's seq and digest. Writers
    serialise on it, so the chain never forks; the verification compares the chain's end with it, so a
    removed last row shows too."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    digest = models.CharField(max_length=64, default=TRAIL_GENESIS)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="trailhead_single_row")]

    def __str__(self) -> str:
        return f"trail head at {self.seq}"
