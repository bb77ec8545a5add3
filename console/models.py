"""What an operator adds to a turn beside the journal: notes, a repaired lineage, the reason it stays blocked.

The journal is evidence and the engine's projection (Turn) is rebuilt from it, so an operator's repair
never edits either: it lives here, is shown beside the engine's values, and every change is recorded as an
OperatorAction (kind `turn_edit`) with the diff, through console.services.turn_annotate.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from journals.models import Turn


class TurnAnnotation(models.Model):
    turn = models.OneToOneField(Turn, on_delete=models.PROTECT, related_name="annotation")
    lineage_repair = models.TextField(
        blank=True,
        default="",
        help_text="The lineage the turn really comes from, when the journal's is missing or wrong.",
    )
    notes = models.TextField(blank=True, default="")
    block_reason = models.TextField(
        blank=True, default="", help_text="Why the turn stays blocked, in the operator's words."
    )
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")

    def __str__(self) -> str:
        return f"annotation of {self.turn}"
