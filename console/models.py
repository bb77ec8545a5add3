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


class SavedView(models.Model):
    """A filter of a list a person named to come back to (console.services.saved_view_create writes it).

    ``query`` is the list's query string as its own filter form accepted it; it is theirs alone: nobody
    else sees it, and it names no run that a later change of their teams would let them see.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    page = models.CharField(max_length=16)  # the list: console.services.SAVED_VIEW_PAGES
    name = models.CharField(max_length=80)
    query = models.CharField(max_length=2000)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "page", "name"], name="savedview_user_page_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.page})"
