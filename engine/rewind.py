"""A resumed fold's way back: the live branch's last records with what they changed in its view, so that a
fork or checkpoint whose point lies a little before the fold's head is served without a fold from the start.

A resumed fold pre-scanned only its new lines, so it did not keep the fold at a point that an earlier line
reached and a new fork or checkpoint names (docs/engine.md, "Incremental assessment"). Real runtimes
rewind a few turns. The live branch keeps an ``UndoLog`` of its last ``window`` records: for each, the state
its turn had before it (the state object itself, made copy-on-write so the record cannot change it in
place), the view's schema and its ``unplanned`` violations. The view at a point is the branch's view now
with the records after the point undone, newest first; its cost grows with how far back the point lies
(plus one copy of the branch's table of turns), not with the run. A point further back than the log reaches
is not served: the fold stops with ``fork_into_past`` or ``checkpoint_into_past`` as before. Forks are
written on the live branch, so the other branches keep none (a stale writer's checkpoint that reaches back
folds from the start).

The view built is the one a fold from the start keeps at that point, state for state: a state no record
after the point wrote is the very object the branch's view still holds, and a state written since is the
object the branch held before (a fold from the start shares and copies the same ones, so the snapshot's
bytes are the same). The log is not part of a snapshot's bytes: a fold read back from them starts a new
log at its head.

Justified by ``benchmarks/bench_incremental.py --grow`` ("batches with a fork": the journal's forks rewind
about 440 records) and the growth benchmark (docs/perf/2026-12-06-fork-rewind.md): without it, a batch
whose fork reaches before it folds the whole prefix.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .fold import TurnState, View

# The default depth, in records of the live branch, of the log a resumed fold keeps (the engine's caller sets
# its own: LOOPX_REWIND_WINDOW_LINES for the worker).
REWIND_WINDOW = 20_000
# The generation of a state an undo log holds: no view has it, so whoever writes the state copies it first.
_FROZEN = -1

# One record of a branch: its lsn, whether it was the first record read at that lsn (the point of that lsn
# is the view just after it), its turn (None: it names none), the state that turn had before it (None: not
# planned on the branch yet), the view's schema and unplanned violations before it.
Entry = tuple[int, bool, str | None, TurnState | None, int, Any]


class UndoLog:
    """The last ``window`` records of one branch, each with what it may change in the branch's view."""

    __slots__ = ("entries", "origin")

    def __init__(self, window: int, origin: int | None) -> None:
        self.entries: deque[Entry] = deque(maxlen=window)
        # The lsn whose fold the view was before the first entry (-1: the branch's start), while no entry
        # has been dropped since; None: not known.
        self.origin = origin

    def note(self, view: View, lsn: int, first: bool, turn: Any) -> None:
        """Before a record of the branch at ``lsn`` changes ``view`` (its ``turn``, as the record spells it).
        Every path of assess.py that folds a record of a branch that has a log calls it first: a record
        folded without it would not be undone."""
        entries = self.entries
        if len(entries) == entries.maxlen:
            self.origin = None  # the oldest entry goes: what came before it is out of reach
        state = None
        if turn.__class__ is str:
            state = view.turns.get(turn)
            if state is not None and state.gen == view.gen:
                state.gen = _FROZEN  # the record writes a copy, this one stays as it was
        else:
            turn = None
        entries.append((lsn, first, turn, state, view.schema, view.unplanned))

    def since(self, lsn: int) -> list[Entry] | None:
        """The entries of the records after the branch's point ``lsn`` (the first record it read at that
        lsn), newest first; None when the log does not reach back that far."""
        later: list[Entry] = []
        for entry in reversed(self.entries):
            if entry[0] == lsn and entry[1]:
                return later
            later.append(entry)
        return later if self.origin == lsn else None

    def rewound(self, view: View, lsn: int) -> View | None:
        """The branch's view just after the first record it read at ``lsn`` (``view``: the branch's view
        now, which is left as it is), or None when the log does not reach back that far."""
        undo = self.since(lsn)
        if undo is None:
            return None
        back = view.snapshot()  # shares every state; the branch copies a state before it next writes it
        turns = back.turns
        # Newest first, so that each turn ends as the oldest record after the point found it. Turns are
        # never removed from a view, so one planned after the point is dropped and the others keep their order.
        for _, _, turn, state, schema, unplanned in undo:
            if turn is not None:
                if state is None:
                    turns.pop(turn, None)
                else:
                    turns[turn] = state
            back.schema = schema
            back.unplanned = unplanned
        back.unmarked()  # its turns are not those of the snapshot it started as
        return back


def turns_since(log: UndoLog | None, lsn: int, turns: set[str] | None) -> set[str] | None:
    """``turns`` with those the branch's records after its point ``lsn`` named (the only turns whose fold a
    fork from that point leaves behind); None when the log does not reach that far, or ``turns`` is None."""
    later = log.since(lsn) if log is not None and turns is not None else None
    if later is None or turns is None:
        return None
    turns.update(entry[2] for entry in later if entry[2] is not None)
    return turns
