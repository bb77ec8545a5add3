"""A run's and a turn's last change: what "latest change first" sorts by and "Last change" shows.

A turn's last change (``Turn.updated_at``) moves when a record or an assessment changes its picture, and
when a person acts on it: an operator decision, the gate's parking, an assignment. A run's
(``Run.changed_at``) moves with its records and with every such act on one of its turns, and with a
journal repair. Each writer of those acts calls these, in its own transaction.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from journals.models import Run, Turn


def turn_change_mark(*, turn_pk: int, run_pk: int, at: datetime | None = None) -> None:
    """The turn changed now (the caller holds the turn's row lock). Its run's change is written once the
    transaction commits: lock order is the run's row before a turn's (recovery.services._lock_turn), and
    the caller already holds the turn's, so the run's row is not taken inside."""
    moment = at or timezone.now()
    Turn.objects.filter(pk=turn_pk, updated_at__lt=moment).update(updated_at=moment)
    transaction.on_commit(partial(run_change_mark, run_pk=run_pk, at=moment))


def run_change_mark(*, run_pk: int, at: datetime | None = None) -> None:
    """The run changed at ``at`` (now by default); a later change already marked stays."""
    moment = at or timezone.now()
    Run.objects.filter(pk=run_pk, changed_at__lt=moment).update(changed_at=moment)
