"""Journal repairs: an operator's typed, audited decision about a run whose journal has a run-level fault
(docs/repair.md). A model module of the `recovery` app (imported by recovery/models.py); recovery/repair/services.py
holds the preview and the apply.

A repair never touches the records: JournalRecord stays append-only and byte for byte what arrived. A
repair is an input of the assessment beside them (its identity is part of the assessment's, like operator
evidence), saying which lines the engine reads:

- ``accept_prefix``: the records through ``through_seq`` (a verified prefix), then the records stored after
  the repair (``at_seq``); the records in between are quarantined: kept, exported, never read, and every
  turn with a record among them is blocked ``repair_quarantined``;
- ``supersede``: the corrected journal the runtime re-sent (kept here verbatim, its sha256 recorded), then the
  records stored after the repair.

The run's latest repair is the one in force. Repairs are append-only: a later repair supersedes an earlier
one; neither is ever edited or removed.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import OuterRef, Q
from django.utils import timezone

from journals.models import Run
from kernel.appendonly import AppendOnlyModel

ACCEPT_PREFIX, SUPERSEDE = "accept_prefix", "supersede"
REPAIR_KINDS = (ACCEPT_PREFIX, SUPERSEDE)
# The typed reason of a turn that has records in the quarantined part of an accepted prefix.
REPAIR_QUARANTINED = "repair_quarantined"


class JournalRepair(AppendOnlyModel):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="repairs")
    number = models.PositiveIntegerField()  # 1, 2, 3, ... per run: "repair #3"
    kind = models.CharField(max_length=16, choices=[(k, k.replace("_", " ")) for k in REPAIR_KINDS])
    # accept_prefix: the last record accepted (seq); null for supersede.
    through_seq = models.BigIntegerField(null=True, blank=True)
    # The committed prefix the repair was decided on: records after at_seq arrived later and are read as usual.
    at_seq = models.BigIntegerField()
    at_prefix_key = models.CharField(max_length=120)
    # The quarantined (accept_prefix) or superseded (supersede) records: how many, and the sha256 of their
    # bytes as the export writes them (each line ended by a newline), so the evidence is named exactly.
    set_aside_records = models.BigIntegerField(default=0)
    set_aside_sha256 = models.CharField(max_length=64)
    # supersede: the corrected journal, verbatim.
    replacement = models.BinaryField(default=b"", blank=True)
    replacement_sha256 = models.CharField(max_length=64, blank=True, default="")
    replacement_records = models.BigIntegerField(default=0)
    # The digest of the preview the operator applied (recovery/repair/services.py): the apply is refused when the
    # run or its evidence moved since.
    preview_digest = models.CharField(max_length=64)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="journalrepair_unique_number"),
            models.CheckConstraint(condition=Q(kind__in=REPAIR_KINDS), name="journalrepair_kind_valid"),
            models.CheckConstraint(condition=Q(number__gte=1), name="journalrepair_number_gte_1"),
            models.CheckConstraint(
                condition=(Q(kind=ACCEPT_PREFIX, through_seq__isnull=False, through_seq__gte=0)
                           & Q(through_seq__lte=models.F("at_seq")))
                | Q(kind=SUPERSEDE, through_seq__isnull=True),
                name="journalrepair_through_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind=ACCEPT_PREFIX) | (Q(kind=SUPERSEDE) & ~Q(replacement_sha256="")),
                name="journalrepair_supersede_has_replacement",
            ),
        ]

    def __str__(self) -> str:  # never the bytes
        return f"repair #{self.number} of {self.run_id} ({self.kind})"

    def identity(self) -> list[object]:
        """What the assessment's identity holds of the repair."""
        return [self.pk, self.kind, self.through_seq, self.at_seq, self.replacement_sha256]

    @property
    def text(self) -> str:
        return f"assessed after repair #{self.number} by {self.actor_name}: {self.reason}"

    def summary(self) -> dict[str, object]:
        """The repair as an assessment's output and the API name it (never the bytes)."""
        return {
            "id": self.pk,
            "number": self.number,
            "kind": self.kind,
            "through_seq": self.through_seq,
            "at_seq": self.at_seq,
            "set_aside_records": self.set_aside_records,
            "set_aside_sha256": self.set_aside_sha256,
            "replacement_sha256": self.replacement_sha256 or None,
            "replacement_records": self.replacement_records,
            "actor": self.actor_name,
            "reason": self.reason,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "text": self.text,
        }


def repairs_latest_first(run: Run | int | OuterRef) -> models.QuerySet[JournalRepair]:
    """The run's repairs, the one in force first: a run's repair in force is its latest by number (``run``
    may be an outer reference: the assessment reads it beside the run's row, recovery/services.py)."""
    return JournalRepair.objects.filter(run=run).order_by("-number")


def repair_in_force(run: Run | int) -> JournalRepair | None:
    """The run's latest repair (the one the assessment reads), or None."""
    return repairs_latest_first(run).first()
