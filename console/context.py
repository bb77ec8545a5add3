"""What every console page's template reads beside its own: the reader's role (console.permissions,
journals.access), who reviews a turn, the page number asked for. One module, imported at the top."""

from __future__ import annotations

from django.http import HttpRequest

from journals import access
from journals.models import Turn
from recovery.assignments import services as assignment
from recovery.selectors import RUN_LEVEL_CODES


def page_number(request: HttpRequest) -> int:
    """The page asked for (``?page=``), 1 when it is missing or not a number."""
    try:
        return max(1, int(request.GET.get("page", "1")))
    except ValueError:
        return 1


def role_context(request: HttpRequest) -> dict[str, object]:
    """What the reader may do: decide (the operator role), and which role they hold."""
    return {
        "can_operate": access.can_operate(request.user),
        "role": access.role_of(request.user),
        "run_level_codes": RUN_LEVEL_CODES,
    }


def review_context(request: HttpRequest, turn: Turn) -> dict[str, object]:
    """Who reviews the turn, and whom an operator may hand it to (the "Assign to…" list)."""
    review = assignment.assignment_of(turn_pk=turn.pk)
    people = assignment.assignable_users(run_id=turn.run.run_id) if access.can_operate(request.user) else []
    return {"review": review, "assignable": people}
