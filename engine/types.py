"""Typed vocabulary of the contract: codes, decisions, resolutions and the assessment's shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

DEFAULT_PHASES: tuple[str, ...] = ("plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend")


class Code(StrEnum):
    # run-level (section 6): any one blocks every turn
    STORAGE_CORRUPTION = "storage_corruption"
    RECORD_INVALID = "record_invalid"
    RUN_MISMATCH = "run_mismatch"
    LSN_GAP = "lsn_gap"
    CHAIN_BROKEN = "chain_broken"
    SCHEMA_UNSUPPORTED = "schema_unsupported"
    SCHEMA_REGRESSION = "schema_regression"
    KIND_UNKNOWN = "kind_unknown"
    FORK_INVALID = "fork_invalid"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    OFFSET_MISMATCH = "offset_mismatch"
    # turn-level
    UNKNOWN_TURN = "unknown_turn"
    LINEAGE_MISSING = "lineage_missing"
    LINEAGE_CONFLICT = "lineage_conflict"
    PHASE_PREFIX_VIOLATION = "phase_prefix_violation"
    INTENT_UNKNOWN = "intent_unknown"
    INTENT_CONFLICT = "intent_conflict"
    UNSAFE_REDISPATCH = "unsafe_redispatch"
    IDEMPOTENCY_KEY_MISSING = "idempotency_key_missing"
    STATUS_PHASE_MISMATCH = "status_phase_mismatch"

    @property
    def run_level(self) -> bool:
        return self in RUN_LEVEL


RUN_LEVEL = frozenset(
    {
        Code.STORAGE_CORRUPTION,
        Code.RECORD_INVALID,
        Code.RUN_MISMATCH,
        Code.LSN_GAP,
        Code.CHAIN_BROKEN,
        Code.SCHEMA_UNSUPPORTED,
        Code.SCHEMA_REGRESSION,
        Code.KIND_UNKNOWN,
        Code.FORK_INVALID,
        Code.CHECKPOINT_MISMATCH,
        Code.OFFSET_MISMATCH,
    }
)

# A reason that is not a violation (section 6).
EFFECT_INDETERMINATE = "effect_indeterminate"


class Decision(StrEnum):
    COMPLETE = "complete"
    FINALIZE = "finalize"
    RESUME = "resume"
    BLOCKED = "blocked"
    DISCARDED = "discarded"


class EffectClass(StrEnum):
    SAFE = "safe"
    IDEMPOTENT = "idempotent"
    UNSAFE = "unsafe"


class Resolution(StrEnum):
    SETTLED = "settled"
    REPLAY = "replay"
    REISSUE = "reissue"
    INDETERMINATE = "indeterminate"


class Evidence(StrEnum):
    """An operator's finding about an intent (section 6); an input beside the journal."""

    HAPPENED = "happened"
    NOT_HAPPENED = "not_happened"


class SnapshotUnusable(Exception):
    """A fold snapshot cannot continue this journal: fold it from the start instead (always correct).

    ``reason`` is one of ``SNAPSHOT_REASONS`` (docs/engine.md, "Incremental assessment")."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


# Why a snapshot cannot continue: another engine, projection or snapshot format; bytes that are not what
# was sealed; other operator evidence than it was folded under; a fork or checkpoint in the new lines that
# needs the fold of a point the snapshot no longer holds.
SNAPSHOT_REASONS = frozenset({"version", "corrupt", "evidence", "fork_into_past", "checkpoint_into_past"})

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
KINDS = frozenset(
    {"turn_planned", "phase_committed", "intent_dispatched", "effect_observed", "turn_terminal", "fork", "checkpoint"}
)


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    branch: int | None
    lsn: int | None
    turn: str | None
    detail: str
    line: int  # 1-based line number in the journal; orders violations in file order

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": str(self.code),
            "branch": self.branch,
            "lsn": self.lsn,
            "turn": self.turn,
            "detail": self.detail,
        }


# IntentView and TurnDecision are built once per intent and turn of a journal (100,000s): slotted
# dataclasses with their ordinary __init__, several times as fast as a frozen one's
# (benchmarks/bench_engine.py, docs/perf/2026-12-02-engine-predicates.md). Nothing changes them after
# the engine made them.
@dataclass(slots=True)
class IntentView:
    intent: str
    effect_class: str
    branch: int
    live: bool
    resolution: str
    idempotency_key: str | None = None
    dispatches: int = 1
    outcome: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "intent": self.intent,
            "effect_class": str(self.effect_class),
            "branch": self.branch,
            "live": self.live,
            "resolution": str(self.resolution),
        }


@dataclass(slots=True)
class TurnDecision:
    turn: str
    lineage: str | None
    branch: int
    decision: Decision
    resume_from: str | None
    reason: str | None
    completed_phases: tuple[str, ...]
    intents: tuple[IntentView, ...]
    phases: tuple[str, ...] = ()
    terminal: str | None = None
    # Where the blocking reason came from (line, branch, lsn), for pages that spell it out.
    reason_line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "lineage": self.lineage,
            "branch": self.branch,
            "decision": self.decision.value,
            "resume_from": self.resume_from,
            "reason": self.reason,
            "completed_phases": list(self.completed_phases),
            "intents": [i.to_dict() for i in self.intents],
        }


@dataclass(frozen=True, slots=True)
class BranchView:
    branch: int
    parent: int | None
    from_lsn: int | None  # the parent's last lsn this branch keeps (-1: none of the parent's own)
    fork_lsn: int | None  # lsn of the fork record on the parent
    last_lsn: int  # highest lsn read on this branch (-1: none)
    live: bool
    discarded_from: int | None  # this branch's own records after this lsn are discarded (None: none are)


@dataclass(frozen=True, slots=True)
class Assessment:
    run: str | None
    live_branch: int
    records: int
    violations: tuple[Violation, ...]
    turns: tuple[TurnDecision, ...]
    branches: tuple[BranchView, ...] = ()
    checkpoints: tuple[dict[str, Any], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of `assess_journal --json` (docs/contract.md, section 7)."""
        return {
            "run": self.run,
            "live_branch": self.live_branch,
            "records": self.records,
            "violations": [v.to_dict() for v in self.violations],
            "turns": [t.to_dict() for t in self.turns],
        }

    @property
    def run_blocked(self) -> Violation | None:
        for v in self.violations:
            if Code(v.code).run_level and v.code != Code.OFFSET_MISMATCH:
                return v
        for v in self.violations:
            if v.code == Code.OFFSET_MISMATCH:
                return v
        return None
