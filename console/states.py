"""The state a console page shows for a turn, in one place.

Today it is the recovery gate's answer as a list can read it without per-turn queries: the engine's decision,
overridden by the operator decision in force (an operator block or a park holds the turn; an approval of the
engine's current blocking reason lets it go on). Every page of the run (its counts, its grid, its event
history) reads a turn's state through ``turn_state`` and annotates its turns with ``with_state``, so that
pointing the console at another model of a turn's effective state is one edit here.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from journals.models import Turn

from .forms import UNASSESSED
from .selectors import with_gate

STATES = ("blocked", "resume", "finalize", "complete", "discarded", UNASSESSED)


def with_state(turns: QuerySet[Turn]) -> QuerySet[Turn]:
    """``turns`` with what ``turn_state`` reads (in the same query: correlated subqueries)."""
    return with_gate(turns)


def turn_state(turn: Any) -> str:
    """One of STATES for a turn read through ``with_state`` (or a row of ``state_rows``)."""
    decision = _get(turn, "decision")
    gate_kind = _get(turn, "gate_kind")
    if gate_kind in ("block", "park"):
        return "blocked" if decision not in ("complete", "discarded") else str(decision)
    if decision is None:
        return UNASSESSED
    if decision == "blocked" and gate_kind == "approve" and _get(turn, "gate_engine_reason") == _get(turn, "reason"):
        return "resume"  # approved: the gate lets it go on from its committed phases
    return str(decision)


def state_counts(turns: QuerySet[Turn]) -> dict[str, int]:
    """Turns by state in one grouped query, each group's state decided by ``turn_state``."""
    counts = dict.fromkeys(STATES, 0)
    rows = (
        with_state(turns.order_by())
        .values("decision", "reason", "gate_kind", "gate_engine_reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        state = turn_state(row)
        counts[state] = counts.get(state, 0) + int(row["n"])
    return counts


def _get(turn: Any, name: str) -> Any:
    return turn.get(name) if isinstance(turn, dict) else getattr(turn, name, None)
