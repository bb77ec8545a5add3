"""Review assignments of turns: who holds which turn for review (recovery/assignments/models.py).

``turn_assign`` and ``turn_unassign`` are the only writers; the turn page, the bulk page and the API call
them. ``assigned_to`` is the one reader of the name every page shows. An assignment stays on the row when
the turn is approved, blocked or finished (the history of who looked at it); the inbox lists only the
assigned turns still held by the gate.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from journals import access
from journals.actors import Actor, person_of
from journals.changes import turn_change_mark
from journals.models import Turn, TurnEffective
from kernel.errors import ServiceError
from recovery.assignments.models import TurnAssignment
from recovery.state import DONE, HOLD
from trail.services import operator_action_record, reason_clean


class AssignError(ServiceError):
    """An assignment refused (403 role, 400 assignee, 404 turn out of scope, 409 finished turn)."""


def _reason(reason: Any, default: str) -> str:
    """The why of an assignment: optional (taking a turn needs no essay), checked like every reason."""
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        return default
    return reason_clean(reason=reason)


def _may_act(user: Any, run_id: str) -> bool:
    return access.can_operate(user) and access.run_scope(user=user).allows(run_id)


def _picture(assignment: TurnAssignment | None) -> dict[str, Any]:
    if assignment is None:
        return {"assignee": None}
    return {
        "assignee": assignment.assignee.get_username(),
        "assigned_by": assignment.assigned_by.get_username(),
        "assigned_at": assignment.assigned_at.isoformat(),
    }


def _locked(turn: Turn, actor: Actor) -> tuple[Turn, TurnAssignment | None, User]:
    locked = Turn.objects.select_for_update().select_related("run").get(pk=turn.pk)
    if not access.run_scope(user=actor).allows(locked.run.run_id):
        raise AssignError(404, "not_found", "no such turn")
    person = person_of(actor)
    if not access.can_operate(actor) or person is None:
        raise AssignError(403, "operator_required", "assigning a turn needs the operator role")
    current = TurnAssignment.objects.select_for_update().select_related("assignee", "assigned_by").filter(turn=locked)
    return locked, current.first(), person


def turn_assign(*, turn: Turn, actor: Actor, assignee: Any, reason: str | None = None) -> TurnAssignment:
    """Give the turn's review to ``assignee`` (the actor themself: "take it"). Both must hold the operator
    role and see the turn's run. Assigning the current assignee again changes nothing and records nothing."""
    with transaction.atomic():
        locked, current, person = _locked(turn, actor)
        if assignee is None or not getattr(assignee, "is_active", False) or not _may_act(assignee, locked.run.run_id):
            raise AssignError(
                400, "assignee_invalid", "the assignee must be an operator of a team that sees this turn's run"
            )
        if current is not None and current.assignee_id == assignee.pk:
            return current
        state = TurnEffective.objects.filter(turn=locked).values_list("gate", flat=True).first()
        if state == DONE:
            raise AssignError(409, "turn_done", "a finished or discarded turn needs no reviewer")
        before = _picture(current)
        mine = assignee.pk == person.pk
        why = _reason(reason, "took the turn for review" if mine else f"handed the turn to {assignee.get_username()}")
        if current is None:
            current = TurnAssignment(turn=locked)
        current.assignee, current.assigned_by, current.assigned_at = assignee, person, timezone.now()
        current.save()
        turn_change_mark(turn_pk=locked.pk, run_pk=locked.run_id, at=current.assigned_at)
        operator_action_record(
            actor=actor,
            kind="turn_assign",
            run=locked.run,
            turn=locked,
            reason=why,
            before=before,
            after=_picture(current),
        )
    return current


def turn_unassign(*, turn: Turn, actor: Actor, reason: str | None = None) -> None:
    """Release the turn's review (any operator who sees it may: a reviewer who left must not pin a turn).
    An unassigned turn stays as it is and records nothing."""
    with transaction.atomic():
        locked, current, person = _locked(turn, actor)
        if current is None:
            return
        before = _picture(current)
        current.delete()
        turn_change_mark(turn_pk=locked.pk, run_pk=locked.run_id)
        operator_action_record(
            actor=actor,
            kind="turn_unassign",
            run=locked.run,
            turn=locked,
            reason=_reason(reason, "released the turn's review"),
            before=before,
            after=_picture(None),
        )


# --- Reading ----------------------------------------------------------------------------------------


def assigned_to(turn: Any) -> str | None:
    """The username of the turn's reviewer, read through ``with_assignee`` (no query of its own)."""
    try:
        assignment = turn.assignment
    except ObjectDoesNotExist:
        return None
    return str(assignment.assignee.get_username()) if assignment is not None else None


def with_assignee(turns: QuerySet[Turn]) -> QuerySet[Turn]:
    """``turns`` with their reviewer joined (the same query)."""
    return turns.select_related("assignment__assignee")


def assignee_filter(value: str, *, user: Any) -> str:
    """The ``assignee`` filter as recovery.state.turns_matching reads it: ``me`` becomes the user's name."""
    return str(user.get_username()) if value == "me" else value


def inbox_count(*, user: Any) -> int:
    """Turns assigned to ``user`` that the gate still holds, in their scope."""
    scope = access.run_scope(user=user)
    return (
        Turn.objects.filter(scope.q("run__run_id"), assignment__assignee=user, effective__gate=HOLD).order_by().count()
    )


def assignable_users(*, run_id: str) -> list[str]:
    """The usernames a turn of ``run_id`` may be handed to (one query): what turn_assign accepts."""
    return access.operators_of_run(run_id=run_id)


def assignment_of(*, turn_pk: int) -> TurnAssignment | None:
    """One turn's assignment with its people (one query): the turn page."""
    return TurnAssignment.objects.select_related("assignee", "assigned_by").filter(turn_id=turn_pk).first()
