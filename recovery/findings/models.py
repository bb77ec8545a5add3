"""Findings: typed facts the scheduled audits found, for an operator to review. A model module of the
`recovery` app (imported by recovery/models.py), since the gate holds a run on a blocking finding;
recovery/findings/services.py holds the transitions.

A finding names one fact: (kind, run, turn, fact key). The same fact is never open twice (a partial
unique constraint over the rows that are not resolved); seeing it again only moves ``last_seen``. Once
resolved, the same fact seen again is a new finding, so a resolution is never silently undone.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from journals.models import ID_MAX, Run, Turn

# kind -> (audit that finds it, what it means)
KINDS: dict[str, tuple[str, str]] = {
    "lost_turn": ("stale_turns", "an unfinished turn has written nothing for too long"),
    "chain_broken": ("chain_verification", "a stored record's prev chain or lsn sequence is broken"),
    # Also opened by a package import for each journal line that is not a complete record (a torn tail,
    # kept verbatim: recovery/packages/services.py); resolving it is the operator's repair of that line.
    "storage_corruption": (
        "chain_verification",
        "stored records differ from what was ingested, or an imported journal has a torn line",
    ),
    "decision_changed": ("engine_change", "a new engine version decides a turn differently for the same prefix"),
    "assessment_diverged": ("refold", "a stored assessment differs from a whole fold of the same prefix"),
    "blocked_turn_unclaimed": ("unclaimed_blocked_turns", "a blocked turn has waited too long for an operator"),
    "assessment_missed": ("assessment_sweep", "a committed batch was never assessed (its task was lost)"),
    # Of no run: the operator trail's own chain (trail/chain.py) no longer verifies.
    "trail_broken": ("trail_verification", "a row of the operator trail was edited, removed or added behind it"),
}
FINDING_KINDS = tuple(KINDS)
# Integrity findings hold the whole run at the recovery gate until an operator resolves them: a prefix
# that no longer verifies is unknown, and unknown blocks (contract, preamble).
BLOCKING_KINDS = ("chain_broken", "storage_corruption")
OPEN, ACKNOWLEDGED, RESOLVED = "open", "acknowledged", "resolved"
FINDING_STATES = (OPEN, ACKNOWLEDGED, RESOLVED)
UNRESOLVED = (OPEN, ACKNOWLEDGED)


class Finding(models.Model):
    kind = models.CharField(max_length=32, choices=[(k, k.replace("_", " ")) for k in FINDING_KINDS])
    # Null only for a finding about no run (``trail_broken``).
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="findings")
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.PROTECT, related_name="findings")
    # The turn's id, or "" for a run-level fact: part of the unique key, where a NULL turn would never
    # collide with another NULL and the same run-level fact could open twice.
    subject = models.CharField(max_length=ID_MAX, blank=True, default="")
    fact_key = models.CharField(max_length=200, blank=True, default="")
    # What the audit saw (redacted: never a secret field, never a record's raw bytes). Updated on each
    # sighting so that, e.g., the age of a blocked turn stays current.
    evidence = models.JSONField(default=dict)
    blocks_run = models.BooleanField(default=False)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)
    seen_count = models.BigIntegerField(default=1)
    state = models.CharField(max_length=16, choices=[(s, s) for s in FINDING_STATES], default=OPEN)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledge_reason = models.TextField(blank=True, default="")
    # null resolved_by with a resolved state: the audit itself saw the condition clear (never for the
    # integrity kinds, which only a person resolves); resolved_by_name says which.
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    resolved_by_name = models.CharField(max_length=150, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution_reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-last_seen", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=FINDING_KINDS), name="finding_kind_valid"),
            models.CheckConstraint(condition=Q(state__in=FINDING_STATES), name="finding_state_valid"),
            models.CheckConstraint(
                condition=Q(state=RESOLVED, resolved_at__isnull=False)
                | (~Q(state=RESOLVED) & Q(resolved_at__isnull=True)),
                name="finding_resolved_at_iff_resolved",
            ),
            models.UniqueConstraint(
                fields=["kind", "run", "subject", "fact_key"],
                condition=~Q(state=RESOLVED),
                name="finding_unique_unresolved_fact",
            ),
            # NULLs never collide in the one above: a fact of no run is unique by itself.
            models.UniqueConstraint(
                fields=["kind", "subject", "fact_key"],
                condition=~Q(state=RESOLVED) & Q(run__isnull=True),
                name="finding_unique_unresolved_runless_fact",
            ),
            models.CheckConstraint(
                condition=Q(run__isnull=False) | Q(kind="trail_broken"), name="finding_run_required"
            ),
        ]
        indexes = [
            models.Index(fields=["state", "-last_seen"], name="finding_state_seen"),
            models.Index(fields=["run", "state"], name="finding_run_state"),
            models.Index(fields=["kind", "state"], name="finding_kind_state"),
        ]

    def __str__(self) -> str:
        where = f"{self.run_id}/{self.subject}" if self.subject else str(self.run_id)
        return f"{self.kind} {where} ({self.state})"

    @property
    def audit(self) -> str:
        return KINDS[self.kind][0]

    @property
    def meaning(self) -> str:
        return KINDS[self.kind][1]
