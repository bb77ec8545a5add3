"""The one door to a run and to a turn, for every page and every API answer (docs/access.md).

A door checks the caller's scope before it reads anything else: a person outside the run's teams is told
the run (or turn) does not exist, a 404 whatever the truth, so that no answer confirms another team's run.
A runtime token outside its own prefix is refused 403 ``run_forbidden``: it knows its prefix, and the
refusal is the same whether the run exists or not. A ``..._for_write`` door also asks that a person hold
the operator role (a runtime token acts on the runs of its prefix).
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from journals.access import RunScope, can_operate, run_scope
from journals.actors import Actor
from journals.models import ApiToken, Run, Turn
from journals.selectors import run_find, turn_lookup, turns_with_timeline
from kernel.errors import ServiceError

NO_RUN = "No such run."
NO_TURN = "No such run or turn."


def token_of(actor: Actor) -> ApiToken | None:
    """The runtime token ``actor`` is or stands for (the API's RuntimePrincipal), or None for a person."""
    if isinstance(actor, ApiToken):
        return actor
    token = getattr(actor, "token", None)
    return token if getattr(actor, "is_runtime", False) and isinstance(token, ApiToken) else None


def scope_of(actor: Actor) -> RunScope:
    """The runs ``actor`` may see and act on (journals.access decides)."""
    return run_scope(user=actor, token=token_of(actor))


def run_id_check(*, actor: Actor, run_id: str, missing: str = NO_RUN) -> RunScope:
    """Refuse a run id outside ``actor``'s scope before anything is read: 403 for a token, 404 for a person."""
    scope = scope_of(actor)
    if scope.allows(run_id):
        return scope
    if token_of(actor) is not None:
        raise ServiceError(403, "run_forbidden", "this token may not access this run")
    raise Http404(missing)


def writer_check(*, actor: Actor) -> None:
    """A write needs a runtime token or a person with the operator role."""
    if token_of(actor) is None and not can_operate(actor):
        raise ServiceError(403, "role_required", "You need the operator role to do this.")


def _one_run(*, actor: Actor, pk: int | None, run_id: str | None) -> Run:
    if run_id is not None:
        run_id_check(actor=actor, run_id=run_id)
        found = run_find(run_id=run_id)
    else:
        found = Run.objects.filter(scope_of(actor).q("run_id"), pk=pk or 0).first()
    if found is None:
        raise Http404(NO_RUN)
    return found


def run_for_read(*, actor: Actor, pk: int | None = None, run_id: str | None = None) -> Run:
    """The run by its pk (pages) or its id (the API), if ``actor`` sees it."""
    return _one_run(actor=actor, pk=pk, run_id=run_id)


def run_for_write(*, actor: Actor, pk: int | None = None, run_id: str | None = None) -> Run:
    """The run ``actor`` is about to change: in their scope, and they may write."""
    run = _one_run(actor=actor, pk=pk, run_id=run_id)
    writer_check(actor=actor)
    return run


def _turns(*, timeline: bool) -> QuerySet[Turn]:
    return turns_with_timeline() if timeline else Turn.objects.select_related("run")


def _one_turn(*, actor: Actor, pk: int | None, run_id: str | None, turn_id: str | None, timeline: bool) -> Turn:
    if run_id is not None:
        run_id_check(actor=actor, run_id=run_id, missing=NO_TURN)
        found = turn_lookup(run_id=run_id, turn_id=turn_id or "", timeline=timeline)
    else:
        found = _turns(timeline=timeline).filter(scope_of(actor).q("run__run_id"), pk=pk or 0).first()
    if found is None:
        raise Http404(NO_TURN)
    return found


def turn_for_read(
    *,
    actor: Actor,
    pk: int | None = None,
    run_id: str | None = None,
    turn_id: str | None = None,
    timeline: bool = False,
) -> Turn:
    """The turn by its pk (pages) or its run's id and its own (the API), if ``actor`` sees its run; with
    its effective state, phases and intents read in the same few queries when ``timeline``."""
    return _one_turn(actor=actor, pk=pk, run_id=run_id, turn_id=turn_id, timeline=timeline)


def turn_for_write(
    *,
    actor: Actor,
    pk: int | None = None,
    run_id: str | None = None,
    turn_id: str | None = None,
    timeline: bool = False,
) -> Turn:
    """The turn ``actor`` is about to decide on, claim or report: in their scope, and they may write."""
    turn = _one_turn(actor=actor, pk=pk, run_id=run_id, turn_id=turn_id, timeline=timeline)
    writer_check(actor=actor)
    return turn
