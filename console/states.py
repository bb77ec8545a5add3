"""The state a console page of a run shows for each of its turns, read from the one effective state.

A turn's effective state is decided once (recovery/state.py) and stored in journals.TurnEffective. The run
page's counts, grid and event history show its decision as the gate answers it: `blocked` for every held
turn (by the engine, an operator or an integrity finding), `resume` or `finalize` for a turn the gate lets
go on (an approved one included), `complete` and `discarded`; `unassessed` before the first assessment.
The turns list's `decision` filter is the same value, so a count links to exactly its turns.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Count, QuerySet

from journals.models import DECISIONS, Turn
from recovery.state import UNASSESSED

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


def state_counts(turns: QuerySet[Turn]) -> dict[str, int]:
    """Turns by effective decision in one grouped query."""
    counts = dict.fromkeys(STATES, 0)
    for row in turns.order_by().values("effective__decision").annotate(n=Count("id")).order_by():
        key = turn_state(row)
        counts[key] = counts.get(key, 0) + int(row["n"])
    return counts
