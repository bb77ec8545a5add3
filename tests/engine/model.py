"""An independent model of the contract for *valid* journals: it only takes legal steps, writes them with
the engine's `JournalWriter`, and predicts the exact `assess_journal --json` object (section 7) from its own
bookkeeping, so that the engine's decisions are checked against a second implementation of sections 2-6.

The model never reads the engine's fold: per-timeline turn state, the fork tree, the world of effects and
the operator evidence are kept here, in the plainest form. `tests/engine/strategies.py` drives it with
Hypothesis (`valid_journals()`); the chaos and store layers can drive it directly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from engine import DEFAULT_PHASES, fold_state, state_digest
from engine.writer import JournalWriter

DEFINITIVE = ("succeeded", "failed")


@dataclass
class TurnModel:
    lineage: str
    phases: tuple[str, ...]
    plan_branch: int
    done: int = 0
    terminal: str | None = None


@dataclass
class Timeline:
    turns: dict[str, TurnModel] = field(default_factory=dict)


@dataclass
class DispatchModel:
    branch: int
    lsn: int
    outcomes: set[str] = field(default_factory=set)

    @property
    def outcome(self) -> str | None:
        if {"succeeded", "failed"} <= self.outcomes:
            return "conflicting"
        for definitive in DEFINITIVE:
            if definitive in self.outcomes:
                return definitive
        return "unknown" if self.outcomes else None


@dataclass
class IntentModel:
    turn: str
    intent: str
    effect_class: str
    key: str | None
    dispatches: list[DispatchModel] = field(default_factory=list)

    def bound(self) -> int | None:
        """The first dispatch without a definitive readback: what operator evidence is about."""
        for i, d in enumerate(self.dispatches):
            if d.outcome not in DEFINITIVE:
                return i
        return None


class JournalModel:
    def __init__(self, run: str = "run-model", *, version: int = 2) -> None:
        self.w = JournalWriter(run, version=version)
        self.timelines: dict[int, Timeline] = {0: Timeline()}
        self.parent: dict[int, tuple[int, int] | None] = {0: None}  # branch -> (parent, from_lsn)
        # The fold of a branch's timeline at a point, kept for the points a fork may rewind to.
        self.points: dict[tuple[int, int], Timeline] = {(0, -1): Timeline()}
        self.marked: set[tuple[int, int]] = set()
        self.world: dict[tuple[str, str], IntentModel] = {}
        self.evidence: dict[tuple[str, str], str] = {}
        self.first_planning: dict[str, tuple[int, str]] = {}  # turn -> (branch, lineage), insertion-ordered
        self.counter = 0

    # -- bookkeeping ---------------------------------------------------------------------------------------
    @property
    def live(self) -> int:
        return self.w.branch

    def _written(self, branch: int) -> None:
        lsn = self.w.next_lsn[branch] - 1
        if (branch, lsn) in self.marked:
            self.points[(branch, lsn)] = copy.deepcopy(self.timelines[branch])

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}#{self.counter}"

    def open_turns(self, branch: int | None = None) -> list[str]:
        timeline = self.timelines[self.live if branch is None else branch]
        return [t for t, s in timeline.turns.items() if s.terminal is None]

    # -- steps (each one legal by construction) -----------------------------------------------------------
    def plan(self, turn: str, lineage: str, phases: list[str] | None, branch: int | None = None) -> None:
        b = self.live if branch is None else branch
        timeline = self.timelines[b]
        existing = timeline.turns.get(turn)
        if existing is not None:
            # Re-planning is legal only as the same plan with the same lineage, before the terminal record.
            assert existing.terminal is None
            lineage, phases = existing.lineage, list(existing.phases)
        if b == self.live:
            self.w.plan(turn, lineage, phases)
        else:
            self._stale(
                "turn_planned",
                b,
                turn=turn,
                lineage=lineage,
                **({"stages" if self.w.version == 1 else "phases": phases} if phases is not None else {}),
            )
        if existing is None:
            timeline.turns[turn] = TurnModel(lineage, tuple(phases or DEFAULT_PHASES), b)
        self.first_planning.setdefault(turn, (b, lineage))
        self._written(b)

    def commit_next(self, turn: str, branch: int | None = None) -> None:
        b = self.live if branch is None else branch
        state = self.timelines[b].turns[turn]
        assert state.terminal is None and state.done < len(state.phases)
        phase = state.phases[state.done]
        if b == self.live:
            self.w.commit(turn, phase)
        else:
            self._stale("phase_committed", b, turn=turn, phase=phase)
        state.done += 1
        self._written(b)

    def _stale(self, kind: str, branch: int, **fields: Any) -> None:
        live = self.w.branch
        self.w.branch = branch
        try:
            self.w.append(kind, **fields)
        finally:
            self.w.branch = live

    def dispatch_new(self, turn: str, intent: str, effect_class: str) -> None:
        assert turn in self.open_turns() and (turn, intent) not in self.world
        key = f"key-{intent}" if effect_class == "idempotent" else None
        self.world[(turn, intent)] = IntentModel(turn, intent, effect_class, key)
        self._dispatch(turn, intent)

    def can_retry(self, turn: str, intent: str) -> bool:
        model = self.world[(turn, intent)]
        if turn not in self.open_turns():
            return False
        if model.effect_class != "unsafe":
            return True
        latest = model.dispatches[-1]
        if latest.outcome == "failed":
            return True
        bound = model.bound()
        return self.evidence.get((turn, intent)) == "not_happened" and bound == len(model.dispatches) - 1

    def can_give_evidence(self, turn: str, intent: str) -> bool:
        model = self.world[(turn, intent)]
        return (
            model.effect_class == "unsafe"
            and (turn, intent) not in self.evidence
            and model.bound() == len(model.dispatches) - 1
        )

    def give_evidence(self, turn: str, intent: str, finding: str) -> None:
        assert self.can_give_evidence(turn, intent)
        self.evidence[(turn, intent)] = finding

    def retry(self, turn: str, intent: str) -> None:
        assert self.can_retry(turn, intent)
        self._dispatch(turn, intent)

    def _dispatch(self, turn: str, intent: str) -> None:
        model = self.world[(turn, intent)]
        self.w.dispatch(turn, intent, model.effect_class, key=model.key)
        model.dispatches.append(DispatchModel(self.live, self.w.next_lsn[self.live] - 1))
        self._written(self.live)

    def observe(self, turn: str, intent: str, outcome: str) -> None:
        assert turn in self.open_turns() and self.world[(turn, intent)].dispatches
        self.w.observe(turn, intent, outcome)
        self.world[(turn, intent)].dispatches[-1].outcomes.add(outcome)
        self._written(self.live)

    def terminal(self, turn: str, status: str) -> None:
        state = self.timelines[self.live].turns[turn]
        assert state.terminal is None
        assert status != "completed" or state.done == len(state.phases)
        self.w.terminal(turn, status)
        state.terminal = status
        self._written(self.live)

    def mark(self) -> None:
        self.marked.add((self.live, self.w.mark()))

    def rewind_points(self) -> list[int]:
        """The lsns of the live branch a fork may rewind to: -1 and the marked points already written."""
        return [-1] + sorted(
            lsn for (b, lsn) in self.points if b == self.live and lsn >= 0 and lsn < self.w.next_lsn[b]
        )

    def fork(self, from_lsn: int) -> None:
        parent = self.live
        base = copy.deepcopy(self.points[(parent, from_lsn)])
        new_branch = self.w.fork(from_lsn)
        self.parent[new_branch] = (parent, from_lsn)
        self.timelines[new_branch] = base
        self.points[(new_branch, -1)] = copy.deepcopy(base)
        self._written(parent)

    def checkpoint(self, with_state: bool) -> None:
        self.w.checkpoint(with_state=with_state)
        self._written(self.live)

    def checkpoint_back(self, covers: int) -> None:
        """A checkpoint of the live timeline through one of its earlier points (a marked lsn, or -1), its
        digest that of the fold from the start through that point (what a runtime that kept it writes)."""
        self.w.append(
            "checkpoint", covers_lsn=covers, state_digest=state_digest(fold_state(self.w.lines, self.live, covers))
        )
        self._written(self.live)

    def upgrade(self) -> None:
        assert self.w.version == 1
        self.w.version = 2

    def stale_branches(self) -> list[int]:
        return [b for b in self.timelines if b != self.live]

    # -- the prediction --------------------------------------------------------------------------------------
    def _cut(self) -> dict[int, float]:
        cut: dict[int, float] = {self.live: float("inf")}
        branch = self.live
        while (link := self.parent[branch]) is not None:
            parent, from_lsn = link
            cut[parent] = from_lsn
            branch = parent
        return cut

    def _resolution(self, model: IntentModel) -> str:
        latest = model.dispatches[-1]
        if latest.outcome in DEFINITIVE:
            return "settled"
        finding = self.evidence.get((model.turn, model.intent))
        if finding is not None and model.bound() == len(model.dispatches) - 1:
            return "settled" if finding == "happened" else "replay"
        return {"safe": "replay", "idempotent": "reissue"}.get(model.effect_class, "indeterminate")

    def expected(self) -> dict[str, Any]:
        cut = self._cut()
        live = self.timelines[self.live]
        turns = []
        for name, (first_branch, first_lineage) in self.first_planning.items():
            intents = []
            blocked = False
            for model in self.world.values():
                if model.turn != name:
                    continue
                latest = model.dispatches[-1]
                is_live = any(d.lsn <= cut.get(d.branch, -1) for d in model.dispatches)
                resolution = self._resolution(model)
                blocked |= is_live and resolution == "indeterminate"
                intents.append(
                    {
                        "intent": model.intent,
                        "effect_class": model.effect_class,
                        "branch": latest.branch,
                        "live": is_live,
                        "resolution": resolution,
                    }
                )
            state = live.turns.get(name)
            if state is None:
                home = self.timelines[first_branch].turns[name]
                entry = {
                    "turn": name,
                    "lineage": first_lineage,
                    "branch": first_branch,
                    "decision": "discarded",
                    "resume_from": None,
                    "reason": None,
                    "completed_phases": list(home.phases[: home.done]),
                }
            else:
                if blocked:
                    decision, resume_from, reason = "blocked", None, "effect_indeterminate"
                elif state.terminal is not None:
                    decision, resume_from, reason = "complete", None, None
                elif state.done == len(state.phases):
                    decision, resume_from, reason = "finalize", None, None
                else:
                    decision, resume_from, reason = "resume", state.phases[state.done], None
                entry = {
                    "turn": name,
                    "lineage": state.lineage,
                    "branch": state.plan_branch,
                    "decision": decision,
                    "resume_from": resume_from,
                    "reason": reason,
                    "completed_phases": list(state.phases[: state.done]),
                }
            entry["intents"] = intents
            turns.append(entry)
        return {
            "run": self.w.run if self.w.lines else None,
            "live_branch": self.live,
            "records": len(self.w.lines),
            "violations": [],
            "turns": turns,
        }
