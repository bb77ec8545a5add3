"""The state a console page of a run shows for each of its turns, read from the one effective state.

A turn's effective state is decided once (recovery/state.py) and stored in journals.TurnEffective. The run
page counts its turns by that state, in the words every other page uses ("held: effect unconfirmed",
"blocked by an operator"), each count linking to the turns list's `state` filter, so a count links to exactly
its turns. Its grid places its marks by the decision the gate answers: `blocked` for every held turn (by the
engine, an operator or an integrity finding), `resume` or `finalize` for a turn the gate lets go on (an
approved one included), `complete` and `discarded`; `unassessed` before the first assessment.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Count, QuerySet

from journals.models import DECISIONS, Turn
from recovery.state import UNASSESSED

from .selectors import STATE_ORDER

STATES = (*DECISIONS, UNASSESSED)


def with_state(turns: QuerySet[Turn]) -> QuerySet[Turn]:
    """``turns`` with their effective state joined (the same query)."""
    return turns.select_related("effective")


def turn_state(turn: Any) -> str:
    """One of STATES: the effective decision of a turn read through ``with_state`` (or a values row)."""
    if isinstance(turn, dict):
        return str(turn.get("effective__decision") or UNASSESSED)
    try:
        return str(turn.effective.decision)
    except ObjectDoesNotExist:
        return UNASSESSED


def effective_counts(turns: QuerySet[Turn]) -> dict[str, int]:
    """Turns by effective state in one grouped query, held states first (console.selectors.STATE_ORDER), then
    the turns not yet assessed; only the states some turn is in."""
    found = {
        str(state or UNASSESSED): int(n)
        for state, n in turns.order_by().values_list("effective__state").annotate(n=Count("id")).order_by()
    }
    return {key: found[key] for key in (*(str(s) for s in STATE_ORDER), UNASSESSED) if found.get(key)}
