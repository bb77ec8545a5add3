"""The timeline fold: per-turn state of one timeline, and its canonical, documented form.

A *timeline* is a branch's inherited prefix followed by its own records (journal-contract.md, section 4).
Its fold carries every turn planned on it: lineage, plan, committed phases, terminal status, the intents
dispatched on it, and the turn-level violations found on it so far (so that rebuilding from a checkpoint
never unblocks a turn). It is always v2-shaped: v1 records are upcast before they are folded, so a fold
over v1 records equals the fold over the same records written as v2, byte for byte.

The canonical form (docs/engine.md, "The canonical fold") is::

    {"schema": <highest record version on the timeline, 0 when empty>,
     "turns": [                                    # sorted by turn id
        {"turn", "lineage", "phases", "committed", "terminal",
         "intents": [{"intent", "effect_class", "idempotency_key", "dispatches", "outcome"}],  # first dispatch order
         "violations": [{"code", "branch", "lsn"}]}]}                                           # timeline order

A checkpoint's ``state_digest`` is ``digest(fold)`` of its timeline through ``covers_lsn``.

Effects are facts about the world, not about a branch: retries across branches, readbacks recorded on
another branch, ``intent_unknown``/``intent_conflict``/``unsafe_redispatch`` are decided by the world ledger
(assess.py), which is rebuilt from every record, not carried in a timeline fold.
"""

from __future__ import annotations

from typing import Any

from .types import Code

# Copy-on-write: a TurnState may be shared by several views (a snapshot taken for a fork or checkpoint
# shares the live view's objects). Each view has a generation; a state whose generation differs from its
# view's is copied before the first write. Snapshots bump the view's generation.
_GENERATION = 0


def next_generation() -> int:
    global _GENERATION
    _GENERATION += 1
    return _GENERATION


class TurnState:
    __slots__ = ("lineage", "phases", "committed", "terminal", "intents", "violations", "plan_branch", "gen")

    def __init__(
        self,
        lineage: str | None,
        phases: tuple[str, ...],
        plan_branch: int,
        gen: int,
    ) -> None:
        self.lineage = lineage
        self.phases = phases
        self.committed: list[str] = []
        self.terminal: str | None = None
        # intent id -> [effect_class, idempotency_key, dispatches on this timeline, outcome of the latest]
        self.intents: dict[str, list[Any]] = {}
        # (code, branch, lsn, line): line orders them against world-ledger violations; not in the canonical form
        self.violations: list[tuple[str, int, int, int]] = []
        self.plan_branch = plan_branch
        self.gen = gen

    def copy(self, gen: int) -> TurnState:
        other = TurnState(self.lineage, self.phases, self.plan_branch, gen)
        other.committed = list(self.committed)
        other.terminal = self.terminal
        other.intents = {k: list(v) for k, v in self.intents.items()}
        other.violations = list(self.violations)
        return other

    def to_canonical(self, turn: str) -> dict[str, Any]:
        return {
            "turn": turn,
            "lineage": self.lineage,
            "phases": list(self.phases),
            "committed": list(self.committed),
            "terminal": self.terminal,
            "intents": [
                {"intent": i, "effect_class": c, "idempotency_key": k, "dispatches": n, "outcome": o}
                for i, (c, k, n, o) in self.intents.items()
            ],
            "violations": [{"code": c, "branch": b, "lsn": ln} for c, b, ln, _ in self.violations],
        }

    @classmethod
    def from_canonical(cls, item: dict[str, Any], gen: int) -> TurnState:
        # plan_branch is not part of the canonical form; a rebuilt state only needs it for display.
        state = cls(item["lineage"], tuple(item["phases"]), -1, gen)
        state.committed = list(item["committed"])
        state.terminal = item["terminal"]
        state.intents = {
            i["intent"]: [i["effect_class"], i["idempotency_key"], i["dispatches"], i["outcome"]]
            for i in item["intents"]
        }
        state.violations = [(v["code"], v["branch"], v["lsn"], 0) for v in item["violations"]]
        return state


class View:
    """The fold of one timeline as it stands: turn states, the highest schema version seen, and the
    ``unknown_turn`` violations of turns named before they were planned on it (they move into the turn's own
    violations when it is planned, so a turn named too early is blocked; they are in the canonical form so
    that a checkpoint between the two records carries them)."""

    __slots__ = ("turns", "schema", "gen", "unplanned")

    def __init__(self) -> None:
        self.turns: dict[str, TurnState] = {}
        self.schema = 0
        self.gen = next_generation()
        # (turn, code, branch, lsn, line), timeline order; a tuple so that snapshots can share it.
        self.unplanned: tuple[tuple[str, str, int, int, int], ...] = ()

    def snapshot(self) -> View:
        """An immutable-by-convention copy; both sides copy a shared TurnState before writing it."""
        snap = View()
        snap.turns = dict(self.turns)
        snap.schema = self.schema
        snap.unplanned = self.unplanned
        self.gen = next_generation()
        return snap

    def take_unplanned(self, turn: str) -> list[tuple[str, int, int, int]]:
        """Remove and return (code, branch, lsn, line) of the violations that named ``turn`` before its
        planning on this timeline."""
        if not self.unplanned:
            return []
        mine = [(c, b, ln, line) for t, c, b, ln, line in self.unplanned if t == turn]
        if mine:
            self.unplanned = tuple(item for item in self.unplanned if item[0] != turn)
        return mine

    def writable(self, turn: str) -> TurnState:
        state = self.turns[turn]
        if state.gen != self.gen:
            state = state.copy(self.gen)
            self.turns[turn] = state
        return state

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
    }
)
