"""The timeline fold: per-turn state of one timeline, and its canonical, documented form.

A *timeline* is a branch's inherited prefix followed by its own records (docs/contract.md, section 4).
Its fold carries every turn planned on it: lineage, plan, committed phases, terminal status, the intents
dispatched on it, and the turn-level violations found on it so far (so that rebuilding from a checkpoint
never unblocks a turn). It is always v2-shaped: v1 records are upcast before they are folded, so a fold
over v1 records equals the fold over the same records written as v2, byte for byte.

The canonical form (docs/engine.md, "The canonical fold") is::

    {"schema": <highest record version on the timeline, 0 when empty>,
     "turns": [                                    # sorted by turn id
        {"turn", "lineage", "phases", "committed", "terminal",
         "intents": [{"intent", "effect_class", "idempotency_key", "dispatches", "outcome"}],  # first dispatch order
         "violations": [{"code", "branch", "lsn"}]}],                                          # timeline order
     "unplanned": [{"turn", "code", "branch", "lsn"}]}  # unknown_turn of turns not planned (yet), timeline order

A checkpoint's ``state_digest`` is ``digest(fold)`` of its timeline through ``covers_lsn``.

Effects are facts about the world, not about a branch: retries across branches, readbacks recorded on
another branch, ``intent_unknown``/``intent_conflict``/``unsafe_redispatch`` are decided by the world ledger
(assess.py), which is rebuilt from every record, not carried in a timeline fold.

Memory: one ``TurnState`` per turn and timeline, whatever the number of records that name it. Committed
phases are a count (they are always a prefix of the plan), intents are immutable tuples in a dict created
on the first dispatch, violations a tuple (usually empty, shared).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import islice
from operator import attrgetter
from typing import Any

from .canonical import canonical_bytes_no_float
from .types import Code

try:
    from orjson import dumps as _orjson_dumps

    _dumps: Callable[[Any], bytes] | None = _orjson_dumps
except ImportError:  # pragma: no cover - exercised only on installs without orjson
    _dumps = None

# Copy-on-write: a TurnState may be shared by several views (a snapshot taken for a fork or checkpoint
# shares the live view's objects). Each view has a generation; a state whose generation differs from its
# view's is copied before the first write. Snapshots bump the view's generation.
_GENERATION = 0

# An intent on a timeline: (effect_class, idempotency_key, dispatches on this timeline, merged outcome of
# the latest dispatch). Immutable, so a copied TurnState can share them.
IntentEntry = tuple[str, str | None, int, str | None]
# A turn-level violation on a timeline: (code, branch, lsn, line). `line` orders it against world-ledger
# violations and is not part of the canonical form.
TurnViolation = tuple[str, int, int, int]


def next_generation() -> int:
    global _GENERATION
    _GENERATION += 1
    return _GENERATION


class TurnState:
    __slots__ = ("lineage", "phases", "done", "terminal", "intents", "violations", "plan_branch", "gen", "canon")

    def __init__(self, lineage: str | None, phases: tuple[str, ...], plan_branch: int, gen: int) -> None:
        self.lineage = lineage
        self.phases = phases
        self.done = 0  # committed phases: always phases[:done]
        self.terminal: str | None = None
        self.intents: dict[str, IntentEntry] | None = None
        self.violations: tuple[TurnViolation, ...] = ()
        self.plan_branch = plan_branch
        self.gen = gen
        # Its canonical bytes, kept once the state can no longer change (see View.digest).
        self.canon: bytes | None = None

    @property
    def committed(self) -> tuple[str, ...]:
        return self.phases[: self.done]

    def copy(self, gen: int) -> TurnState:
        other = TurnState(self.lineage, self.phases, self.plan_branch, gen)
        other.done = self.done
        other.terminal = self.terminal
        other.intents = dict(self.intents) if self.intents is not None else None
        other.violations = self.violations
        return other

    def to_canonical(self, turn: str) -> dict[str, Any]:
        return {
            "turn": turn,
            "lineage": self.lineage,
            "phases": list(self.phases),
            "committed": list(self.phases[: self.done]),
            "terminal": self.terminal,
            "intents": [
                {"intent": i, "effect_class": c, "idempotency_key": k, "dispatches": n, "outcome": o}
                for i, (c, k, n, o) in (self.intents or {}).items()
            ],
            "violations": [{"code": c, "branch": b, "lsn": ln} for c, b, ln, _ in self.violations],
        }

    @classmethod
    def from_canonical(cls, item: dict[str, Any], gen: int) -> TurnState:
        # plan_branch is not part of the canonical form; a rebuilt state only needs it for display.
        state = cls(item["lineage"], tuple(item["phases"]), -1, gen)
        committed = list(item["committed"])
        if committed != list(state.phases[: len(committed)]):
            raise ValueError("a checkpoint state whose committed phases are not a prefix of the plan")
        state.done = len(committed)
        state.terminal = item["terminal"]
        intents = {
            i["intent"]: (i["effect_class"], i["idempotency_key"], i["dispatches"], i["outcome"])
            for i in item["intents"]
        }
        state.intents = intents or None
        state.violations = tuple((v["code"], v["branch"], v["lsn"], 0) for v in item["violations"])
        return state


# A turn's canonical bytes put together from pieces (canonical_many): its keys in sorted order, each value as
# orjson writes it (the contract's canonical form for values without floats, canonical.py). A piece that
# holds a value from a small set (an effect class, an outcome, a terminal status, null) is written once.
_write: Callable[[Any], bytes] = _dumps if _dumps is not None else canonical_bytes_no_float
_DISPATCHES: dict[int, bytes] = {}
_CLASSES: dict[str, bytes] = {}
_OUTCOMES: dict[str | None, bytes] = {}
_TERMINALS: dict[str | None, bytes] = {}


def _piece(kept: dict[Any, bytes], before: bytes, value: Any, after: bytes) -> bytes:
    """``before``, the value as written, ``after``; kept in ``kept`` (a few hundred at most)."""
    out = kept.get(value)
    if out is None:
        out = before + _write(value) + after
        if len(kept) < 256:
            kept[value] = out
    return out


def _intents_pieces(pieces: list[bytes], intents: dict[str, IntentEntry], names: dict[str, bytes]) -> None:
    """The pieces of ``"intents":[...]``'s value."""
    sep = b"["
    for intent, (effect_class, key, dispatches, outcome) in intents.items():
        name = names.get(intent)
        if name is None:
            name = names[intent] = _write(intent)
        pieces.append(sep)
        sep = b","
        pieces.append(_piece(_DISPATCHES, b'{"dispatches":', dispatches, b',"effect_class":'))
        pieces.append(_piece(_CLASSES, b"", effect_class, b',"idempotency_key":'))
        pieces.append(b"null" if key is None else _write(key))
        pieces.append(b',"intent":')
        pieces.append(name)
        pieces.append(_piece(_OUTCOMES, b',"outcome":', outcome, b"}"))
    pieces.append(b"]")


def canonical_many(states: list[TurnState], turns: list[str]) -> list[bytes]:
    """``[canonical_bytes_no_float(s.to_canonical(t)) ...]``, put together from pieces: what a plan shares
    (its phases, its committed prefixes) and the names that repeat (lineages, intent ids) are written once
    per call; the rest is orjson's spelling of each value. What orjson refuses (an integer beyond 64 bits)
    takes the formula, turn by turn."""
    out: list[bytes] = []
    plans: dict[int, list[bytes]] = {}  # id of a plan (shared, and alive through this call): its pieces
    names: dict[str, bytes] = {}
    lineages: dict[str | None, bytes] = {}
    for state, turn in zip(states, turns, strict=True):
        try:
            phases = state.phases
            plan = plans.get(id(phases))
            if plan is None:
                plan = [b'{"committed":' + _write(phases[:done]) + b',"intents":' for done in range(len(phases) + 1)]
                plan.append(b',"phases":' + _write(phases) + b',"terminal":')
                plans[id(phases)] = plan
            lineage = state.lineage
            lineage_piece = lineages.get(lineage)
            if lineage_piece is None:
                lineage_piece = lineages[lineage] = b',"lineage":' + _write(lineage)
            pieces = [plan[state.done]]
            intents = state.intents
            if intents:
                _intents_pieces(pieces, intents, names)
            else:
                pieces.append(b"[]")
            pieces.append(lineage_piece)
            pieces.append(plan[-1])
            pieces.append(_piece(_TERMINALS, b"", state.terminal, b',"turn":'))
            pieces.append(_write(turn))
            violations = state.violations
            if violations:
                pieces.append(b',"violations":')
                pieces.append(_write([{"branch": b, "code": c, "lsn": ln} for c, b, ln, _ in violations]))
                pieces.append(b"}")
            else:
                pieces.append(b',"violations":[]}')
            out.append(b"".join(pieces))
        except TypeError:  # orjson.JSONEncodeError
            out.append(canonical_bytes_no_float(state.to_canonical(turn)))
    return out


def _kept_bytes(turns: dict[str, TurnState]) -> tuple[bool, list[str], list[Any], list[int], list[TurnState]]:
    """Whether the dict's order is sorted (it stops at the first turn out of order), and then the turns'
    ids, their kept canonical bytes (None where there are none), and the places and states of the turns
    without. One pass that reads each turn once (compiled: a C loop over the dict that reads each state's
    field directly)."""
    keys: list[str] = []
    parts: list[Any] = []
    missing: list[int] = []
    stale: list[TurnState] = []
    last = ""  # before any id
    for turn, state in turns.items():
        if turn < last:
            return False, keys, parts, missing, stale
        last = turn
        canon = state.canon
        if canon is None:
            missing.append(len(parts))
            stale.append(state)
        keys.append(turn)
        parts.append(canon)
    return True, keys, parts, missing, stale


class View:
    """The fold of one timeline as it stands: turn states, the highest schema version seen, and the
    ``unknown_turn`` violations of turns named before they were planned on it (they move into the turn's own
    violations when it is planned, so a turn named too early is blocked; they are in the canonical form so
    that a checkpoint between the two records carries them).

    What changed since a snapshot, so that a checkpoint's digest reads only those turns (digest): ``mark``
    names the turns of a snapshot (None: not known), ``marked`` how many turns the view held then, and
    ``since`` the turns among those whose state the view has replaced since (a write copies a shared state,
    writable). Turns are never removed, and a dict keeps its order, so the turns planned since are the last
    ones. ``ident``: the mark of the turns this view holds, while it is a snapshot nobody has written to."""

    __slots__ = ("turns", "schema", "gen", "unplanned", "mark", "marked", "since", "ident")

    def __init__(self) -> None:
        self.turns: dict[str, TurnState] = {}
        self.schema = 0
        self.gen = next_generation()
        # (turn, code, branch, lsn, line), timeline order; a tuple so that snapshots can share it.
        self.unplanned: tuple[tuple[str, str, int, int, int], ...] = ()
        self.mark: int | None = None
        self.marked = 0
        self.since: set[str] = set()
        self.ident: int | None = None

    def snapshot(self) -> View:
        """An immutable-by-convention copy; both sides copy a shared TurnState before writing it."""
        snap = View()
        snap.turns = dict(self.turns)
        snap.schema = self.schema
        snap.unplanned = self.unplanned
        self.gen = next_generation()
        # The snapshot starts from the mark this view had; this view from the snapshot's turns.
        snap.mark, snap.marked, snap.since = self.mark, self.marked, set(self.since)
        snap.ident = self.mark = next_generation()
        self.marked = len(self.turns)
        self.since = set()
        return snap

    def branch_off(self) -> None:
        """A snapshot becomes a branch's view (a fork): it copies each shared turn state before its first
        write, and its turns are no longer those its mark names."""
        self.gen = next_generation()
        self.ident = None

    def unmarked(self) -> None:
        """Turns were put in or taken out other than by a write (rewind.py): what changed is not known."""
        self.mark = self.ident = None

    def take_unplanned(self, turn: str) -> tuple[TurnViolation, ...]:
        """Remove and return (code, branch, lsn, line) of the violations that named ``turn`` before its
        planning on this timeline."""
        if not self.unplanned:
            return ()
        mine = tuple((c, b, ln, line) for t, c, b, ln, line in self.unplanned if t == turn)
        if mine:
            self.unplanned = tuple(item for item in self.unplanned if item[0] != turn)
        return mine

    def writable(self, turn: str) -> TurnState:
        state = self.turns[turn]
        if state.gen != self.gen:
            state = state.copy(self.gen)
            self.turns[turn] = state
            self.since.add(turn)
        return state

    def digest(self, cache: DigestCache | None = None) -> str:
        """``digest(self.to_canonical())``, without building the whole form.

        Each turn's canonical bytes are computed once and kept on its TurnState as soon as the state can no
        longer change, i.e. when its generation is not this view's (a state shared with a snapshot is
        copied before any write, so it stays as it is for good). With a `cache` from an earlier digest
        (the previous checkpoint), the sha256 resumes from the last saved state before the first turn
        that differs (in sorted order: a new turn, or a state that changed), so a checkpoint costs the
        turns after that point, not the whole fold; with identifiers that grow over time (sequence
        numbers, time-ordered ids) that is the few recent turns. The result is the same either way
        (tests/engine compares it with the contract's formula over the whole fold)."""
        head = b'{"schema":%d,"turns":[' % self.schema
        h = None if cache is None else self._digest_since(cache, head)
        if h is None:
            keys, parts = self._kept_parts()
            if cache is None:
                h = hashlib.sha256(head)
                h.update(b",".join(parts))
            else:
                h = cache.resume(head, keys, parts)
        if cache is not None:
            # What was hashed is the turns of this snapshot: the next one may start from them.
            cache.mark = self.ident
            if self.ident is not None:
                self.mark, self.marked, self.since = self.ident, len(self.turns), set()
        unplanned = [{"turn": t, "code": c, "branch": b, "lsn": ln} for t, c, b, ln, _ in self.unplanned]
        h.update(b'],"unplanned":' + canonical_bytes_no_float(unplanned) + b"}")
        return h.hexdigest()

    def _kept_parts(self) -> tuple[list[str], list[Any]]:
        """Every turn's id and canonical bytes, in sorted order (each turn's bytes computed once: see digest)."""
        # Sorted by turn id. Turns are kept in order of planning, which is already sorted when ids grow over
        # time: then the dict is read once, in its own order (a fold may hold 100,000s of turns).
        ordered, keys, parts, missing, stale = _kept_bytes(self.turns)
        if not ordered:
            _, keys, parts, missing, stale = _kept_bytes(dict(sorted(self.turns.items())))  # ids are unique
        self._fill(parts, missing, stale, [keys[i] for i in missing])
        return keys, parts

    def _fill(self, parts: list[Any], missing: list[int], stale: list[TurnState], turns: list[str]) -> None:
        """``parts[missing[i]]``: the canonical bytes of ``stale[i]``, the state of ``turns[i]``; kept on the
        state when it can no longer change (its generation is not this view's)."""
        if not missing:
            return
        gen = self.gen
        fresh = canonical_many(stale, turns)
        for i, state, canon in zip(missing, stale, fresh, strict=True):
            if state.gen != gen:
                state.canon = canon
            parts[i] = canon

    def _digest_since(self, cache: DigestCache, head: bytes) -> Any:
        """The hash of ``head`` and the turns, from the last digest's when it hashed this view's mark: only
        the turns replaced or planned since are read. None when that does not apply (another view's turns
        were hashed last, or a new turn sorts before one hashed then): digest reads every turn."""
        keys = cache.keys
        parts: list[Any] = cache.parts  # a new turn's place holds None until its bytes are made
        held = len(keys)
        if self.mark is None or self.mark != cache.mark or self.marked != held or not cache.states:
            return None
        turns = self.turns
        # The turns planned since: the last ones of the dict, in order of planning.
        added = list(islice(reversed(turns.items()), len(turns) - held))
        added.reverse()
        ordered, new_keys, new_parts, missing, stale = _kept_bytes(dict(added))
        last = keys[-1] if held else ""
        if not ordered or (new_keys and new_keys[0] <= last):
            return None  # not sorted after the others
        missing = [held + i for i in missing]
        named = [new_keys[i - held] for i in missing]
        first = held
        places: list[int] = []
        for turn in self.since:
            i = bisect_left(keys, turn)
            if i < held and keys[i] == turn:
                places.append(i)
                first = min(first, i)
            elif turn <= last:
                return None  # not a turn of the mark nor a new one (cannot happen: turns are never removed)
        keys.extend(new_keys)
        parts.extend(new_parts)
        for i in places:
            state = turns[keys[i]]
            canon = state.canon
            if canon is None:
                missing.append(i)
                stale.append(state)
                named.append(keys[i])
            else:
                parts[i] = canon
        self._fill(parts, missing, stale, named)
        return cache.resume(head, keys, parts, first)

    def to_canonical(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "turns": [self.turns[t].to_canonical(t) for t in sorted(self.turns)],
            "unplanned": [{"turn": t, "code": c, "branch": b, "lsn": ln} for t, c, b, ln, _ in self.unplanned],
        }

    @classmethod
    def from_canonical(cls, state: dict[str, Any]) -> View:
        view = cls()
        view.schema = int(state["schema"])
        for item in state["turns"]:
            view.turns[item["turn"]] = TurnState.from_canonical(item, view.gen)
        view.unplanned = tuple((u["turn"], u["code"], u["branch"], u["lsn"], 0) for u in state["unplanned"])
        return view


# -- fold snapshots (engine/parts.py) ----------------------------------------------------------------------
# A turn state as a row of plain JSON values: [plan index, lineage, committed count, terminal, intents
# ({intent: entry} or null), violations, plan branch]. Tuples and dicts go to the JSON writer as they are
# (arrays and objects, in their order).

_STATE_FIELDS = attrgetter("lineage", "done", "terminal", "intents", "violations", "plan_branch")
_CODES: dict[str, str] = {code.value: code for code in Code}  # codes read back as the members they were


def code_of(text: str) -> str:
    """A violation code read back: the member it was, or the text as it is."""
    return _CODES.get(text, text)


def state_row(state: TurnState, plan: int) -> list[Any]:
    """The state's row, its plan given by index in a table the writer keeps."""
    return [plan, *_STATE_FIELDS(state)]


def state_from_row(row: Sequence[Any], plans: Sequence[tuple[str, ...]], gen: int) -> TurnState:
    """The state ``state_row`` wrote. ``gen``: a generation no view has, so that a view copies the state
    before its first write to it (views that shared it before share it again)."""
    plan, lineage, done, terminal, intents, violations, plan_branch = row
    state = TurnState(lineage, plans[plan], plan_branch, gen)
    state.done = done
    state.terminal = terminal
    if intents:
        state.intents = dict(zip(intents, map(tuple, intents.values()), strict=True))
    if violations:
        state.violations = tuple((code_of(c), b, ln, line) for c, b, ln, line in violations)
    return state


_HASH_EVERY = 256  # turns between saved hash states


class DigestCache:
    """What the last View.digest hashed (sorted turn ids, their canonical bytes, the hash state every
    256 turns), so that the next one can resume where the two first differ. Holding it costs a few
    references per turn; it is correct whatever views it is used with (everything is compared)."""

    def __init__(self) -> None:
        self.mark: int | None = None  # the mark of the view whose turns were hashed last (View.digest)
        self.head = b""
        self.keys: list[str] = []
        self.parts: list[bytes] = []
        self.states: list[Any] = []  # hashlib objects: states[j] has hashed head + parts[: j * 256]

    def resume(self, head: bytes, keys: list[str], parts: list[bytes], first: int | None = None) -> Any:
        """A sha256 object that has hashed ``head`` and ``b",".join(parts)``. ``first``: the place of the first
        turn that differs from those hashed last, when the caller knows it (else the lists are compared)."""
        j = 0  # the saved state to resume from: every chunk of 256 before it is unchanged
        if head == self.head and self.states:
            if first is not None:
                j = min(first // _HASH_EVERY, len(self.states) - 1)
            else:
                old_keys, old_parts = self.keys, self.parts
                last = min(len(self.states) - 1, len(keys) // _HASH_EVERY)
                # Chunk by chunk, as list comparisons in C (equal objects, or equal bytes, are equal input).
                while j < last:
                    a, b = j * _HASH_EVERY, (j + 1) * _HASH_EVERY
                    if keys[a:b] != old_keys[a:b] or parts[a:b] != old_parts[a:b]:
                        break
                    j += 1
            h = self.states[j].copy()
            del self.states[j + 1 :]
        else:
            h = hashlib.sha256(head)
            self.states = [h.copy()]
        for start in range(j * _HASH_EVERY, len(parts), _HASH_EVERY):
            chunk = b",".join(parts[start : start + _HASH_EVERY])
            h.update(chunk if start == 0 else b"," + chunk)
            if start + _HASH_EVERY <= len(parts):
                self.states.append(h.copy())
        self.head, self.keys, self.parts = head, keys, parts
        return h


def merge_outcome(current: str | None, observed: str) -> str:
    """Readbacks of one dispatch: a definitive outcome is never downgraded by a later ``unknown``; two
    different definitive outcomes are ``conflicting``, which counts as not settled (fail closed)."""
    if observed == "unknown":
        return current if current is not None else "unknown"
    if current in (None, "unknown") or current == observed:
        return observed
    return "conflicting"


TIMELINE_CODES = frozenset(
    {
        Code.LINEAGE_MISSING,
        Code.LINEAGE_CONFLICT,
        Code.PHASE_PREFIX_VIOLATION,
        Code.STATUS_PHASE_MISMATCH,
        Code.IDEMPOTENCY_KEY_MISSING,
        Code.UNKNOWN_TURN,
    }
)
