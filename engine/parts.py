"""A fold snapshot's parts: the fold written so that sealing it costs the turns that changed, not the run.

A fold grows with its turns (views, world ledger, first plannings). Its snapshot is written as parts:

    part 0 (head):  [Assessor.head_rows(), views, snapshots, turn count, orphans]
                    views: [[branch, schema, unplanned], ...] by branch; snapshots: [[branch, lsn, schema,
                    unplanned], ...] by point; orphans: the turns of the world ledger never planned, as
                    [plans, turn rows] sorted by turn
    part g + 1:     [plans, turn rows] of the turns planned g * GROUP to (g + 1) * GROUP - 1, in order of
                    first planning (turns_first); plans: the phase plans their states name, by index

    turn row:       [turn, [line, lineage, branch] (its first planning; null for an orphan), states, refs,
                    world entries]

A turn's ``states`` are its distinct states across the fold's views and snapshots (views share states copy
on write). Each view starts from the view it came from: a branch's from its parent's, a snapshot from its
branch's, the first branch's from nothing. ``refs`` lists only the views whose state differs from the one
they start from: [branch, index] or [branch, lsn, index] for a snapshot, index -1 when the view does not
hold the turn. So a fork changes the rows of the turns its branch left behind, not every row. The world
entries are the turn's ledger entries in order of first dispatch, each as assess.py's ``WORLD_ROW`` without
the turn.

A record changes the state of the turn it names and nothing of another turn (views, ledger and first
planning alike), and a view changes in no other way; a new view is a new object. So the fold keeps what
it last wrote (``Sealed``) and writes again only the parts holding a turn that the lines since named, or
whose views differ from those written then; the head, always. The same fold gives the same parts however
it was folded (tests/engine compares them with a fold from the start).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from itertools import islice
from typing import Any, NamedTuple

from .assess import WORLD_ROW, Assessor, WorldEntry
from .canonical import HAVE_ORJSON
from .fold import TurnState, View, code_of, next_generation, state_from_row, state_row

if HAVE_ORJSON:
    import orjson

GROUP = 1_000  # turns per part, in order of first planning: a batch's new turns fill the last few
CODECS = ("orjson", "json")


class Part(NamedTuple):
    digest: str  # sha256 hex of data
    codec: str  # who wrote the JSON (CODECS)
    data: bytes


# A view of the fold by its key (a branch, or a snapshot's (branch, lsn)), with the view it starts from.
ViewKey = int | tuple[int, int]
Views = dict[ViewKey, tuple[View, View | None]]


class Sealed:
    """What the fold's last snapshot wrote: each turn part, the turns in order of first planning, each turn's
    world entries, the turns of the ledger never planned, the views then, and the turns named since."""

    __slots__ = ("group", "parts", "order", "ordinal", "world_of", "world_done", "orphans", "views", "named")

    def __init__(self) -> None:
        self.group = GROUP  # turns per part when they were written
        self.parts: list[Part] = []
        self.order: list[str] = []
        self.ordinal: dict[str, int] = {}
        self.world_of: dict[str, list[WorldEntry]] = {}
        self.world_done = 0  # ledger entries indexed in world_of
        self.orphans: set[str] = set()
        self.views: Views = {}
        self.named: set[str] | None = set()  # None: any turn may have changed

    def index(self, assessor: Assessor) -> None:
        """Take in the turns planned and the ledger entries made since the last call (both only grow)."""
        for turn in islice(assessor.turns_first, len(self.order), None):
            self.ordinal[turn] = len(self.order)
            self.order.append(turn)
        world_of = self.world_of
        for entry in islice(assessor.world.values(), self.world_done, None):
            world_of.setdefault(entry.turn, []).append(entry)
        self.world_done = len(assessor.world)


def encode(rows: Any) -> Part:
    """The rows as compact JSON. orjson writes them unless it refuses (an integer beyond 64 bits, a lone
    surrogate in a string a record could not encode); then the standard library does, ASCII-escaped."""
    if HAVE_ORJSON:
        try:
            data = orjson.dumps(rows)
            return Part(hashlib.sha256(data).hexdigest(), "orjson", data)
        except TypeError:  # orjson.JSONEncodeError
            pass
    data = json.dumps(rows, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")
    return Part(hashlib.sha256(data).hexdigest(), "json", data)


def decode(codec: str, data: bytes) -> Any:
    # orjson reads an integer beyond 64 bits as a float: rows holding one were written, and are read, by
    # the standard library.
    if codec == "orjson" and HAVE_ORJSON:
        return orjson.loads(data)
    return json.loads(data)


def note_named(assessor: Assessor, named: set[str] | None) -> None:
    """The turns the lines just folded named (None: any turn may be named): their parts are written again."""
    sealed: Sealed | None = assessor.sealed
    if sealed is not None and sealed.named is not None:
        if named is None:
            sealed.named = None
        else:
            sealed.named |= named


def seal_parts(assessor: Assessor) -> list[Part]:
    """The fold's parts, the head first; a turn part is written again only when it may have changed since
    the fold's last snapshot (all of them for a fold that wrote none)."""
    views = _views(assessor)
    sealed: Sealed | None = assessor.sealed
    if sealed is None or sealed.named is None or sealed.group != GROUP:
        sealed = Sealed()
        sealed.index(assessor)
        sealed.orphans = set(sealed.world_of).difference(assessor.turns_first)
        groups: set[int] = set(range(-(-len(sealed.order) // GROUP)))
    else:
        changed = sealed.named | _moved(sealed.views, views)
        sealed.index(assessor)
        for turn in changed:
            if turn in sealed.world_of and turn not in assessor.turns_first:
                sealed.orphans.add(turn)
            else:
                sealed.orphans.discard(turn)
        ordinal = sealed.ordinal
        groups = {ordinal[turn] // GROUP for turn in changed if turn in ordinal}
        groups.update(range(len(sealed.parts), -(-len(sealed.order) // GROUP)))
    listed = list(views.items())
    for g in sorted(groups):
        part = encode(_rows(assessor, sealed, sealed.order[g * GROUP : (g + 1) * GROUP], listed))
        if g < len(sealed.parts):
            sealed.parts[g] = part
        else:
            sealed.parts.append(part)
    sealed.views, sealed.named = views, set()
    assessor.sealed = sealed
    head = [
        assessor.head_rows(),
        [[b, v.schema, v.unplanned] for b, v in sorted(assessor.views.items())],
        [[b, ln, v.schema, v.unplanned] for (b, ln), v in sorted(assessor.snapshots.items())],
        len(sealed.order),
        _rows(assessor, sealed, sorted(sealed.orphans), listed),
    ]
    return [encode(head), *sealed.parts]


def _views(assessor: Assessor) -> Views:
    """Every view of the fold, parents before children: the branches' (a branch forks from a lower one),
    then the snapshots', each with the view it starts from."""
    keys: list[ViewKey] = [*sorted(assessor.views), *sorted(assessor.snapshots)]
    views: Views = {}
    for key in keys:
        view = assessor.snapshots[key] if isinstance(key, tuple) else assessor.views[key]
        parent = _parent_key(assessor, key)
        views[key] = (view, assessor.views.get(parent) if parent is not None else None)
    return views


def _parent_key(assessor: Assessor, key: ViewKey) -> int | None:
    """The branch whose view a view starts from: a snapshot's own branch, a branch's parent."""
    if isinstance(key, tuple):
        return key[0]
    info = assessor.branches.get(key)
    return info.parent if info is not None else None


def _differs(view: View, parent: View | None) -> set[str]:
    """The turns whose state in ``view`` is not the one in the view it starts from."""
    if parent is None:
        return set(view.turns)
    own, theirs = view.turns, parent.turns
    changed = {turn for turn, state in own.items() if theirs.get(turn) is not state}
    changed.update(turn for turn in theirs if turn not in own)
    return changed


def _moved(before: Views, after: Views) -> set[str]:
    """The turns whose refs differ because a view came, went, or is another object under its key."""
    moved: set[str] = set()
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old is not None and new is not None and old[0] is new[0] and old[1] is new[1]:
            continue
        for pair in (old, new):
            if pair is not None:
                moved |= _differs(*pair)
    return moved


def _rows(assessor: Assessor, sealed: Sealed, turns: Sequence[str], views: list[tuple[ViewKey, Any]]) -> list[Any]:
    plans: dict[tuple[str, ...], int] = {}
    firsts = assessor.turns_first
    world_of = sealed.world_of
    rows = []
    for turn in turns:
        states: list[Any] = []
        index: dict[int, int] = {}
        refs: list[Any] = []
        for key, (view, parent) in views:
            state = view.turns.get(turn)
            if state is (parent.turns.get(turn) if parent is not None else None):
                continue
            at = -1
            if state is not None:
                at = index.get(id(state), -1)
                if at < 0:
                    at = index[id(state)] = len(states)
                    states.append(state_row(state, plans.setdefault(state.phases, len(plans))))
            refs.append([*key, at] if isinstance(key, tuple) else [key, at])
        first = firsts.get(turn)
        world = [WORLD_ROW(entry)[1:] for entry in world_of.get(turn, ())]
        rows.append([turn, first, states, refs, world])
    return [list(plans), rows]


def open_parts(parts: Sequence[tuple[str, str, bytes]], evidence: Any) -> Assessor:
    """The fold whose parts (digest, codec, bytes; the head first) a seal wrote, ready to go on
    (``resume_points`` first, then ``feed_batch``); it keeps the parts, so that its next seal writes again
    only those that change. Raises ValueError, TypeError, KeyError or IndexError on rows of another shape."""
    head = decode(parts[0][1], parts[0][2])
    run_rows, view_rows, snapshot_rows, turn_count, orphans = head
    assessor = Assessor.from_head_rows(run_rows, evidence)
    assessor.views = {b: _view(schema, unplanned) for b, schema, unplanned in view_rows}
    assessor.snapshots = {(b, ln): _view(schema, unplanned) for b, ln, schema, unplanned in snapshot_rows}
    views = _views(assessor)
    where: dict[ViewKey, int] = {key: i for i, key in enumerate(views)}
    # Each view's turns, and the index of the view it starts from (a parent comes first).
    targets: list[tuple[dict[str, TurnState], int | None]] = []
    for key, (view, parent) in views.items():
        parent_key = _parent_key(assessor, key)
        targets.append((view.turns, where[parent_key] if parent is not None and parent_key is not None else None))
    sealed = Sealed()
    gen = next_generation()
    for number, (digest, codec, data) in enumerate(parts[1:]):
        _read(assessor, sealed, decode(codec, data), where, targets, gen)
        sealed.parts.append(Part(digest, codec, bytes(data)))
        if len(sealed.order) != min(turn_count, (number + 1) * GROUP):
            raise ValueError("a part holds another number of turns")
    if len(sealed.order) != turn_count:
        raise ValueError("the parts hold another number of turns")
    _read(assessor, sealed, orphans, where, targets, gen)
    sealed.orphans = set(sealed.world_of).difference(sealed.ordinal)
    sealed.world_done = len(assessor.world)
    sealed.views = views
    assessor.sealed = sealed
    return assessor


def _view(schema: int, unplanned: Sequence[Sequence[Any]]) -> View:
    view = View()
    view.schema = schema
    view.unplanned = tuple((t, code_of(c), b, ln, line) for t, c, b, ln, line in unplanned)
    return view


def _read(
    assessor: Assessor,
    sealed: Sealed,
    rows: Sequence[Any],
    where: dict[ViewKey, int],
    targets: list[tuple[dict[str, TurnState], int | None]],
    gen: int,
) -> None:
    plan_rows, turn_rows = rows
    plans = [assessor.shared_plan(plan) for plan in plan_rows]
    firsts, world, world_of = assessor.turns_first, assessor.world, sealed.world_of
    for turn, first, states, refs, entries in turn_rows:
        if first is not None:
            line, lineage, b = first
            firsts[turn] = (line, lineage, b)
            sealed.ordinal[turn] = len(sealed.order)
            sealed.order.append(turn)
        made = [state_from_row(row, plans, gen) for row in states]
        explicit = {where[tuple(ref[:-1]) if len(ref) > 2 else ref[0]]: ref[-1] for ref in refs}
        held: list[TurnState | None] = []
        for i, (turns, parent) in enumerate(targets):
            at = explicit.get(i)
            inherited = held[parent] if parent is not None else None
            state = inherited if at is None else (made[at] if at >= 0 else None)
            held.append(state)
            if state is not None:
                turns[turn] = state
        for row in entries:
            entry = WorldEntry.from_row((turn, *row))
            world[(turn, entry.intent)] = entry
            world_of.setdefault(turn, []).append(entry)
