"""Who reviews a held turn: an operator's review assignment, one row per turn.

Not the runtime's lease (recovery.models.TurnClaim: a worker id and a fencing token). This row says which
person is looking at the turn. It names the current reviewer only; every change is a trail row
(``turn_assign``, ``turn_unassign``), which keeps the history.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from journals.models import Turn


class TurnAssignment(models.Model):
    turn = models.OneToOneField(Turn, on_delete=models.PROTECT, related_name="assignment")
    assignee = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    assigned_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    assigned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-assigned_at", "-id"]
        indexes = [models.Index(fields=["assignee", "turn"], name="turnassignment_assignee")]

    def __str__(self) -> str:
        return f"{self.turn} assigned to {self.assignee}"
