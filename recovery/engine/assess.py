"""Assessment: a journal's committed prefix (plus operator evidence) in, one decision per turn out.

A pure function (journal-contract.md, section 6): the same bytes and evidence give byte-identical output,
and nothing here writes anywhere. The journal is read twice, record by record, never held in memory:

1. a cheap pre-scan finds the points that forks rewind to and checkpoints cover (only lines that can be
   fork or checkpoint records are parsed), so that
2. the main pass can snapshot each timeline's fold exactly there while it folds every record.

Memory therefore grows with the number of turns (times the number of branches), not with the number of
records. Run-level checks (shape, run, lsn, chain, schema, kinds, forks, checkpoints) are per record;
turn rules apply on the timeline of the record's branch; effects (dispatches and readbacks) go into a
world ledger shared by all branches, because a side effect is a fact about the world, not about a branch.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from .canonical import ParsedLine, digest, parse_line
from .fold import TurnState, View, merge_outcome, next_generation
from .types import DEFAULT_PHASES as _DEFAULT_PHASES
from .types import (
    EFFECT_INDETERMINATE,
    KINDS,
    RUN_LEVEL,
    TERMINAL_STATUSES,
    Assessment,
    BranchView,
    Code,
    Decision,
    EffectClass,
    Evidence,
    IntentView,
    Resolution,
    TurnDecision,
    Violation,
)

# Bumped whenever a decision for the same input could change; stored beside every assessment.
ENGINE_VERSION = "1.1.0"

Source = str | os.PathLike[str] | Sequence[bytes] | Callable[[], Iterable[bytes]]
EvidenceMap = Mapping[Any, Any]  # keys: (turn, intent) tuples or bare intent ids; values: Evidence or str

# RFC 3339 date-time (section 5.6), ASCII digits only ([0-9], not \d, which matches every script's digits),
# matched whole (fullmatch: "$" would accept a trailing newline), with the field ranges of the RFC; the
# day is checked against its month by _valid_at.
_RFC3339 = re.compile(
    r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)"
    r"(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)
_MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DEFINITIVE = frozenset({"succeeded", "failed"})
_OUTCOMES = frozenset({"succeeded", "failed", "unknown"})
_PRESCAN_MARKERS = (b"fork", b"checkpoint", b"\\u")  # \u: a kind could be spelled with escapes


class JournalUnreadable(Exception):
    """The journal cannot be read at all (missing file, a directory, no permission)."""


def _is_int(value: Any) -> TypeGuard[int]:
    return type(value) is int


def _nonempty_str(value: Any) -> TypeGuard[str]:
    return type(value) is str and value != ""


def _valid_at(at: Any) -> bool:
    if type(at) is not str:
        return False
    m = _RFC3339.fullmatch(at)
    if m is None:
        return False
    day = int(m.group(3))
    if day <= 28:
        return True
    year, month = int(m.group(1)), int(m.group(2))
    if month == 2 and day == 29:
        return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return day <= _MONTH_DAYS[month]


def iter_lines(source: Source) -> Callable[[], Iterator[bytes]]:
    """A re-openable line iterator: each call starts from the first line again."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise JournalUnreadable(f"cannot read {path.name}: {exc.strerror or exc}") from exc

        def from_file() -> Iterator[bytes]:
            with open(path, "rb") as fh:
                for raw in fh:
                    # The file may end with one newline; a last object without one is complete too.
                    yield raw[:-1] if raw.endswith(b"\n") else raw

        return from_file
    if callable(source):
        factory = source
        return lambda: iter(factory())
    lines = source
    return lambda: iter(lines)


@dataclass(slots=True)
class _Dispatch:
    branch: int
    lsn: int
    line: int
    effect_class: str
    key: str | None
    outcome: str | None = None


@dataclass(slots=True)
class _WorldIntent:
    turn: str
    intent: str
    first_line: int
    dispatches: list[_Dispatch] = field(default_factory=list)
    # (line, code, branch, lsn, detail)
    violations: list[tuple[int, str, int, int, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Branch:
    branch: int
    parent: int | None
    from_lsn: int | None
    fork_lsn: int | None
    next_lsn: int = 0
    last_digest: str | None = None
    discarded_from: int | None = None


@dataclass(slots=True)
class _TurnFirst:
    line: int
    lineage: str | None
    branch: int


def _prescan(lines: Iterable[bytes]) -> Counter[tuple[int, int]]:
    """Points (branch, lsn) whose fold a later fork or checkpoint needs, counted by how many need it."""
    points: Counter[tuple[int, int]] = Counter()
    for line in lines:
        if not any(marker in line for marker in _PRESCAN_MARKERS):
            continue
        obj = parse_line(line).obj
        if obj is None:
            continue
        kind, branch = obj.get("kind"), obj.get("branch")
        if not _is_int(branch):
            continue
        if kind == "fork" and _is_int(obj.get("from_lsn")):
            points[(branch, obj["from_lsn"])] += 1
        elif kind == "checkpoint" and _is_int(obj.get("covers_lsn")):
            points[(branch, obj["covers_lsn"])] += 1
    return points


class _Assessor:
    def __init__(self, points: Counter[tuple[int, int]]) -> None:
        self.points = points
        self.snapshots: dict[tuple[int, int], View] = {}
        self.run: str | None = None
        self.records = 0
        self.violations: list[Violation] = []
        self.branches: dict[int, _Branch] = {0: _Branch(0, None, None, None)}
        self.views: dict[int, View] = {0: View()}
        self.live = 0
        self.world: dict[tuple[str, str], _WorldIntent] = {}
        self.turns_first: dict[str, _TurnFirst] = {}
        self.checkpoints: list[dict[str, Any]] = []
        self.line_no = 0
        self._take_snapshot(0, -1)

    # -- helpers -----------------------------------------------------------------------------------
    def _violate(self, code: str, branch: int | None, lsn: int | None, turn: str | None, detail: str) -> None:
        self.violations.append(Violation(code, branch, lsn, turn, detail, self.line_no))

    def _take_snapshot(self, branch: int, lsn: int) -> None:
        if (branch, lsn) in self.points and (branch, lsn) not in self.snapshots:
            self.snapshots[(branch, lsn)] = self.views[branch].snapshot()

    def _use_snapshot(self, branch: int, lsn: int, *, to_write: bool = False) -> View | None:
        snap = self.snapshots.get((branch, lsn))
        if snap is None:
            return None
        self.points[(branch, lsn)] -= 1
        if self.points[(branch, lsn)] <= 0:
            del self.snapshots[(branch, lsn)]  # nothing else needs it: free the memory
        elif to_write:
            # Someone else (a later fork or checkpoint) still needs this point: a fork gets its own copy,
            # or the new branch's records would leak into the fold the other one reads.
            return snap.snapshot()
        return snap

    def _unknown_turn(self, view: View, turn: str, b: int, ln: int, detail: str) -> None:
        """A record names a turn not planned on this timeline (yet): remembered on the timeline, so that a
        later planning of the turn there is blocked by it."""
        view.unplanned += ((turn, Code.UNKNOWN_TURN, b, ln, self.line_no),)
        self._violate(Code.UNKNOWN_TURN, b, ln, turn, detail)

    def _turn_violation(self, view: View, turn: str, code: str, branch: int, lsn: int, detail: str) -> None:
        state = view.writable(turn)
        state.violations.append((code, branch, lsn, self.line_no))
        self._violate(code, branch, lsn, turn, detail)

    # -- the main pass -----------------------------------------------------------------------------
    def feed(self, line: bytes) -> None:
        self.line_no += 1
        parsed = parse_line(line)
        obj = parsed.obj
        if obj is None:
            # A torn line's branch and lsn are unknown (section 1): never repaired, never quoted.
            self._violate(
                parsed.error or Code.STORAGE_CORRUPTION, None, None, None, f"line {self.line_no}: {parsed.detail}"
            )
            return
        self.records += 1
        self._record(obj, parsed)

    def _record(self, obj: dict[str, Any], parsed: ParsedLine) -> None:
        n = self.line_no
        branch, lsn = obj.get("branch"), obj.get("lsn")
        envelope_ok = _is_int(branch) and branch >= 0 and _is_int(lsn) and lsn >= 0
        b: int | None = branch if envelope_ok else None
        ln: int | None = lsn if envelope_ok else None
        raw_turn = obj.get("turn")
        turn = raw_turn if type(raw_turn) is str else None
        if turn is not None and parsed.error is not None:
            # An invalid record's turn may hold a lone surrogate: it is then not named in the output, which
            # must stay encodable (and never quotes what could not be read).
            try:
                turn.encode("utf-8")
            except UnicodeEncodeError:
                turn = None

        problem: tuple[str, str] | None = None
        v = obj.get("v")
        if parsed.error is not None:
            problem = (Code.RECORD_INVALID, f"line {n}: {parsed.detail}")
        elif not _is_int(v):
            problem = (Code.RECORD_INVALID, f"line {n}: missing or non-integer schema version v")
        elif v not in (1, 2):
            problem = (Code.SCHEMA_UNSUPPORTED, f"line {n}: schema version {v} is not supported (1 or 2)")
        elif type(obj.get("run")) is not str:
            problem = (Code.RECORD_INVALID, f"line {n}: missing or non-string run")
        elif not envelope_ok:
            problem = (Code.RECORD_INVALID, f"line {n}: branch and lsn must be integers >= 0")
        elif type(obj.get("kind")) is not str:
            problem = (Code.RECORD_INVALID, f"line {n}: missing or non-string kind")
        elif not _valid_at(obj.get("at")):
            problem = (Code.RECORD_INVALID, f"line {n}: at is not an RFC 3339 time")

        if problem is None:
            if self.run is None:
                self.run = obj["run"]
            elif obj["run"] != self.run:
                problem = (Code.RUN_MISMATCH, f"line {n}: the record names another run than the first record")
        if problem is None and obj["kind"] not in KINDS:
            problem = (Code.KIND_UNKNOWN, f"line {n}: unknown record kind")

        if problem is not None:
            self._violate(problem[0], b, ln, turn, problem[1])
        if b is None or ln is None:
            return
        assert branch is not None and lsn is not None

        info = self.branches.get(b)
        if info is None:
            self._violate(Code.FORK_INVALID, b, ln, turn, f"line {n}: branch {b} was not created by a fork")
            return
        # lsn continuity per branch: 0, 1, 2, ... in file order.
        if ln != info.next_lsn:
            self._violate(Code.LSN_GAP, b, ln, turn, f"line {n}: lsn {ln} on branch {b}, expected {info.next_lsn}")
        first_at_lsn = ln >= info.next_lsn
        info.next_lsn = max(info.next_lsn, ln + 1)
        # The hash chain (v2 only; a v1 record's prev is ignored).
        if v == 2:
            prev = obj.get("prev", None)
            has_prev = "prev" in obj
            if info.last_digest is None:
                if has_prev:
                    self._violate(
                        Code.CHAIN_BROKEN, b, ln, turn, f"line {n}: prev present on the first record of branch 0"
                    )
            elif not has_prev:
                self._violate(Code.CHAIN_BROKEN, b, ln, turn, f"line {n}: prev missing")
            elif prev != info.last_digest:
                self._violate(
                    Code.CHAIN_BROKEN,
                    b,
                    ln,
                    turn,
                    f"line {n}: prev does not match the digest of the previous record of branch {b}",
                )
        info.last_digest = parsed.digest or hashlib.sha256(b"\x00invalid").hexdigest()

        view = self.views[b]
        if problem is None and _is_int(v):
            if v < view.schema:
                self._violate(
                    Code.SCHEMA_REGRESSION,
                    b,
                    ln,
                    turn,
                    f"line {n}: a v{v} record after a v{view.schema} record on this timeline",
                )
            else:
                view.schema = max(view.schema, v)
            self._semantics(obj, v, b, ln, view)
        if first_at_lsn:
            self._take_snapshot(b, ln)

    def _invalid(self, b: int, ln: int, turn: str | None, what: str) -> None:
        self._violate(Code.RECORD_INVALID, b, ln, turn, f"line {self.line_no}: {what}")

    def _semantics(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View) -> None:
        kind = obj["kind"]
        if kind == "fork":
            self._fork(obj, b, ln)
            return
        if kind == "checkpoint":
            self._checkpoint(obj, b, ln)
            return
        turn = obj.get("turn")
        if not _nonempty_str(turn):
            self._invalid(b, ln, None, f"{kind} needs a non-empty string turn")
            return
        if kind == "turn_planned":
            self._planned(obj, v, b, ln, view, turn)
        elif kind == "phase_committed":
            self._phase(obj, b, ln, view, turn)
        elif kind == "intent_dispatched":
            self._dispatched(obj, v, b, ln, view, turn)
        elif kind == "effect_observed":
            self._observed(obj, b, ln, view, turn)
        else:
            self._terminal(obj, b, ln, view, turn)

    def _after_terminal(self, view: View, turn: str, b: int, ln: int) -> bool:
        state = view.turns[turn]
        if state.terminal is not None:
            self._turn_violation(
                view,
                turn,
                Code.STATUS_PHASE_MISMATCH,
                b,
                ln,
                f"line {self.line_no}: a record names the turn after its terminal record",
            )
            return True
        return False

    def _planned(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        plan_field = "stages" if v == 1 else "phases"
        phases: tuple[str, ...] = _DEFAULT_PHASES
        if plan_field in obj:
            raw = obj[plan_field]
            if type(raw) is not list or not raw or not all(_nonempty_str(p) for p in raw) or len(set(raw)) != len(raw):
                self._invalid(b, ln, turn, f"{plan_field} must be a non-empty list of distinct phase names")
                return
            phases = tuple(raw)
        lineage_raw = obj.get("lineage")
        if lineage_raw is not None and type(lineage_raw) is not str:
            self._invalid(b, ln, turn, "lineage must be a string")
            return
        lineage = lineage_raw or None
        n = self.line_no
        if turn not in self.turns_first:
            self.turns_first[turn] = _TurnFirst(n, lineage, b)
        existing = view.turns.get(turn)
        if existing is None:
            state = view.turns[turn] = TurnState(lineage, phases, b, view.gen)
            state.violations.extend(view.take_unplanned(turn))
            if lineage is None:
                self._turn_violation(view, turn, Code.LINEAGE_MISSING, b, ln, f"line {n}: the turn has no lineage")
            return
        if self._after_terminal(view, turn, b, ln):
            return
        if lineage is None:
            self._turn_violation(view, turn, Code.LINEAGE_MISSING, b, ln, f"line {n}: re-planned without a lineage")
        elif existing.lineage is not None and lineage != existing.lineage:
            self._turn_violation(view, turn, Code.LINEAGE_CONFLICT, b, ln, f"line {n}: re-planned with another lineage")
        elif existing.lineage is None:
            view.writable(turn).lineage = lineage
        if phases != existing.phases:
            # Not named by the contract: a plan that changes under committed phases cannot be trusted.
            self._turn_violation(
                view, turn, Code.PHASE_PREFIX_VIOLATION, b, ln, f"line {n}: re-planned with a different phase plan"
            )

    def _phase(self, obj: dict[str, Any], b: int, ln: int, view: View, turn: str) -> None:
        phase = obj.get("phase")
        if not _nonempty_str(phase):
            self._invalid(b, ln, turn, "phase_committed needs a non-empty string phase")
            return
        n = self.line_no
        if turn not in view.turns:
            self._unknown_turn(view, turn, b, ln, f"line {n}: a phase of a turn not planned on this timeline")
            return
        if self._after_terminal(view, turn, b, ln):
            return
        state = view.turns[turn]
        done = len(state.committed)
        expected = state.phases[done] if done < len(state.phases) else None
        if phase == expected:
            view.writable(turn).committed.append(phase)
            return
        if phase not in state.phases:
            why = "a phase not in the plan"
        elif phase in state.committed:
            why = "a phase committed twice"
        else:
            why = f"out of order: {expected} is not committed yet"
        self._turn_violation(view, turn, Code.PHASE_PREFIX_VIOLATION, b, ln, f"line {n}: {why}")

    def _dispatched(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        intent = obj.get("intent")
        if not _nonempty_str(intent):
            self._invalid(b, ln, turn, "intent_dispatched needs a non-empty string intent")
            return
        key: str | None = obj.get("idempotency_key")
        if key is not None and type(key) is not str:
            self._invalid(b, ln, turn, "idempotency_key must be a string")
            return
        if "args_digest" in obj and type(obj["args_digest"]) is not str:
            self._invalid(b, ln, turn, "args_digest must be a string")
            return
        if v == 1:
            unsafe = obj.get("unsafe")
            if type(unsafe) is not bool:
                self._invalid(b, ln, turn, "a v1 intent_dispatched needs unsafe: true|false")
                return
            effect_class = "unsafe" if unsafe else ("idempotent" if key else "safe")
        else:
            raw_class = obj.get("effect_class")
            if raw_class not in ("safe", "idempotent", "unsafe"):
                self._invalid(b, ln, turn, "effect_class must be safe, idempotent or unsafe")
                return
            effect_class = str(raw_class)
        key = key or None
        n = self.line_no
        # The world ledger: every dispatch is a fact, whatever the branch.
        wkey = (turn, intent)
        world = self.world.get(wkey)
        if world is None:
            world = self.world[wkey] = _WorldIntent(turn, intent, n)
        elif world.dispatches:
            first = world.dispatches[0]
            if effect_class != first.effect_class or key != first.key:
                world.violations.append(
                    (n, Code.INTENT_CONFLICT, b, ln, f"line {n}: a retry changed the intent's effect class or key")
                )
                self._violate(
                    Code.INTENT_CONFLICT, b, ln, turn, f"line {n}: a retry changed the intent's effect class or key"
                )
        world.dispatches.append(_Dispatch(b, ln, n, effect_class, key))
        # The timeline.
        if turn not in view.turns:
            self._unknown_turn(view, turn, b, ln, f"line {n}: an intent of a turn not planned on this timeline")
            return
        if self._after_terminal(view, turn, b, ln):
            return
        state = view.writable(turn)
        if effect_class == "idempotent" and key is None:
            self._turn_violation(
                view,
                turn,
                Code.IDEMPOTENCY_KEY_MISSING,
                b,
                ln,
                f"line {n}: an idempotent intent without an idempotency key",
            )
        entry = state.intents.get(intent)
        if entry is None:
            state.intents[intent] = [effect_class, key, 1, None]
        else:
            entry[2] += 1
            entry[3] = None

    def _observed(self, obj: dict[str, Any], b: int, ln: int, view: View, turn: str) -> None:
        intent, outcome = obj.get("intent"), obj.get("outcome")
        if not _nonempty_str(intent):
            self._invalid(b, ln, turn, "effect_observed needs a non-empty string intent")
            return
        if outcome not in _OUTCOMES:
            self._invalid(b, ln, turn, "outcome must be succeeded, failed or unknown")
            return
        n = self.line_no
        world = self.world.get((turn, intent))
        if world is None or not world.dispatches:
            if world is None:
                world = self.world[(turn, intent)] = _WorldIntent(turn, intent, n)
            world.violations.append(
                (n, Code.INTENT_UNKNOWN, b, ln, f"line {n}: a readback of an intent never dispatched")
            )
            self._violate(Code.INTENT_UNKNOWN, b, ln, turn, f"line {n}: a readback of an intent never dispatched")
        else:
            # A readback is of the intent's latest dispatch before it, wherever it was recorded.
            latest = world.dispatches[-1]
            latest.outcome = merge_outcome(latest.outcome, outcome)
        if turn not in view.turns:
            self._unknown_turn(view, turn, b, ln, f"line {n}: a readback for a turn not planned on this timeline")
            return
        if self._after_terminal(view, turn, b, ln):
            return
        entry = view.turns[turn].intents.get(intent)
        if entry is not None:
            entry = view.writable(turn).intents[intent]
            entry[3] = merge_outcome(entry[3], outcome)

    def _terminal(self, obj: dict[str, Any], b: int, ln: int, view: View, turn: str) -> None:
        status = obj.get("status")
        if status not in TERMINAL_STATUSES:
            self._invalid(b, ln, turn, "status must be completed, failed or cancelled")
            return
        n = self.line_no
        if turn not in view.turns:
            self._unknown_turn(view, turn, b, ln, f"line {n}: a terminal record for a turn not planned")
            return
        if self._after_terminal(view, turn, b, ln):
            return
        state = view.writable(turn)
        state.terminal = status
        if status == "completed" and len(state.committed) != len(state.phases):
            self._turn_violation(
                view,
                turn,
                Code.STATUS_PHASE_MISMATCH,
                b,
                ln,
                f"line {n}: completed with {len(state.phases) - len(state.committed)} phase(s) uncommitted",
            )

    def _fork(self, obj: dict[str, Any], b: int, ln: int) -> None:
        new_branch, from_lsn, reason = obj.get("new_branch"), obj.get("from_lsn"), obj.get("reason")
        if not _is_int(new_branch) or not _is_int(from_lsn) or type(reason) is not str:
            self._invalid(b, ln, None, "fork needs integer new_branch and from_lsn and a string reason")
            return
        n = self.line_no
        highest = max(self.branches)
        why = None
        if b != self.live:
            why = f"the fork is on branch {b}, not on the live branch {self.live}"
        elif new_branch != highest + 1:
            why = f"new_branch must be {highest + 1}"
        elif not (-1 <= from_lsn < ln):
            why = f"from_lsn must be between -1 and {ln - 1}"
        base = None if why else self._use_snapshot(b, from_lsn, to_write=True)
        if why is None and base is None:
            why = "the rewind point could not be folded"  # fail closed; the pre-scan finds every fork
        if why is not None:
            self._violate(Code.FORK_INVALID, b, ln, None, f"line {n}: {why}")
            return
        assert base is not None
        digest_of_fork = digest(obj)
        self.branches[new_branch] = _Branch(new_branch, b, from_lsn, ln, 0, digest_of_fork)
        self.branches[b].discarded_from = from_lsn
        base.gen = next_generation()  # the new branch copies each shared turn state before its first write
        self.views[new_branch] = base
        self.live = new_branch
        self._take_snapshot(new_branch, -1)

    def _checkpoint(self, obj: dict[str, Any], b: int, ln: int) -> None:
        covers, state_digest = obj.get("covers_lsn"), obj.get("state_digest")
        if not _is_int(covers) or type(state_digest) is not str:
            self._invalid(b, ln, None, "checkpoint needs an integer covers_lsn and a string state_digest")
            return
        n = self.line_no
        ok = False
        if -1 <= covers < ln:
            snap = self._use_snapshot(b, covers)
            if snap is not None:
                ok = digest(snap.to_canonical()) == state_digest
                if ok and "state" in obj:
                    ok = digest(obj["state"]) == state_digest
        self.checkpoints.append({"branch": b, "lsn": ln, "covers_lsn": covers, "verified": ok})
        if not ok:
            self._violate(
                Code.CHECKPOINT_MISMATCH,
                b,
                ln,
                None,
                f"line {n}: the checkpoint's state digest does not match the re-fold through lsn {covers}",
            )

    # -- deciding ----------------------------------------------------------------------------------
    def finish(self, expect: Mapping[int, int], evidence: EvidenceMap) -> Assessment:
        end_line = self.line_no + 1
        for branch, expected in sorted(expect.items()):
            info = self.branches.get(branch)
            actual = info.next_lsn - 1 if info else -1
            if actual != expected:
                self.violations.append(
                    Violation(
                        Code.OFFSET_MISMATCH,
                        branch,
                        actual if actual >= 0 else None,
                        None,
                        f"expected high-water lsn {expected} on branch {branch}, the journal holds {actual}",
                        end_line,
                    )
                )

        live_cut = self._live_cut()
        world_by_turn: dict[str, list[_WorldIntent]] = {}
        for w in self.world.values():
            world_by_turn.setdefault(w.turn, []).append(w)
            self._unsafe_retries(w, evidence)
        self.violations.sort(key=lambda x: x.line)  # stable: file order, ties in order found

        run_level = next((x for x in self.violations if x.code in RUN_LEVEL and x.code != Code.OFFSET_MISMATCH), None)
        if run_level is None:
            run_level = next((x for x in self.violations if x.code == Code.OFFSET_MISMATCH), None)

        live_view = self.views[self.live]
        decisions: list[TurnDecision] = []
        for turn, first in sorted(self.turns_first.items(), key=lambda item: item[1].line):
            decisions.append(
                self._decide(turn, first, live_view, live_cut, world_by_turn.get(turn, []), evidence, run_level)
            )
        branch_views = tuple(
            BranchView(
                branch=i.branch,
                parent=i.parent,
                from_lsn=i.from_lsn,
                fork_lsn=i.fork_lsn,
                last_lsn=i.next_lsn - 1,
                live=i.branch == self.live,
                discarded_from=None if i.branch == self.live else i.discarded_from,
            )
            for i in sorted(self.branches.values(), key=lambda i: i.branch)
        )
        return Assessment(
            self.run,
            self.live,
            self.records,
            tuple(self.violations),
            tuple(decisions),
            branch_views,
            tuple(self.checkpoints),
        )

    def _live_cut(self) -> dict[int, float]:
        """Branch -> highest own lsn on the live timeline."""
        cut: dict[int, float] = {self.live: float("inf")}
        info = self.branches[self.live]
        while info.parent is not None:
            assert info.from_lsn is not None
            cut[info.parent] = info.from_lsn
            info = self.branches[info.parent]
        return cut

    @staticmethod
    def _evidence_for(evidence: EvidenceMap, w: _WorldIntent) -> str | None:
        found = evidence.get((w.turn, w.intent), evidence.get(w.intent))
        return str(found.value if isinstance(found, Evidence) else found) if found is not None else None

    @staticmethod
    def _bound(w: _WorldIntent) -> int | None:
        """Operator evidence is about the intent's first dispatch without a definitive readback."""
        for i, d in enumerate(w.dispatches):
            if d.outcome not in _DEFINITIVE:
                return i
        return None

    def _unsafe_retries(self, w: _WorldIntent, evidence: EvidenceMap) -> None:
        found = self._evidence_for(evidence, w)
        bound = self._bound(w)
        for i in range(1, len(w.dispatches)):
            d, prev = w.dispatches[i], w.dispatches[i - 1]
            if d.effect_class != "unsafe":
                continue
            if prev.outcome == "failed" or (bound == i - 1 and found == Evidence.NOT_HAPPENED):
                continue
            detail = f"line {d.line}: an unsafe intent dispatched again while its previous dispatch may have happened"
            w.violations.append((d.line, Code.UNSAFE_REDISPATCH, d.branch, d.lsn, detail))
            self.violations.append(Violation(Code.UNSAFE_REDISPATCH, d.branch, d.lsn, w.turn, detail, d.line))

    def _resolve(self, w: _WorldIntent, evidence: EvidenceMap) -> str:
        latest = w.dispatches[-1]
        if latest.outcome in _DEFINITIVE:
            return Resolution.SETTLED
        found = self._evidence_for(evidence, w)
        if found is not None and self._bound(w) == len(w.dispatches) - 1:
            if found == Evidence.HAPPENED:
                return Resolution.SETTLED
            if found == Evidence.NOT_HAPPENED:
                return Resolution.REPLAY
        return {
            EffectClass.SAFE: Resolution.REPLAY,
            EffectClass.IDEMPOTENT: Resolution.REISSUE,
        }.get(EffectClass(latest.effect_class), Resolution.INDETERMINATE)

    def _decide(
        self,
        turn: str,
        first: _TurnFirst,
        live_view: View,
        live_cut: dict[int, float],
        worlds: list[_WorldIntent],
        evidence: EvidenceMap,
        run_level: Violation | None,
    ) -> TurnDecision:
        state = live_view.turns.get(turn)
        intents: list[IntentView] = []
        for w in sorted(worlds, key=lambda w: w.first_line):
            if not w.dispatches:
                continue
            latest = w.dispatches[-1]
            live = any(d.lsn <= live_cut.get(d.branch, -1) for d in w.dispatches)
            intents.append(
                IntentView(
                    w.intent,
                    latest.effect_class,
                    latest.branch,
                    live,
                    self._resolve(w, evidence),
                    latest.key,
                    len(w.dispatches),
                    latest.outcome,
                )
            )
        if state is None:
            # Planned only on a discarded suffix: evidence, never resumed (rule 2 unless the run is blocked).
            home = self.views[first.branch].turns.get(turn)
            completed = tuple(home.committed) if home else ()
            phases = home.phases if home else ()
            if run_level is not None:
                return TurnDecision(
                    turn,
                    first.lineage,
                    first.branch,
                    Decision.BLOCKED,
                    None,
                    run_level.code,
                    completed,
                    tuple(intents),
                    phases,
                    None,
                    run_level.line,
                )
            return TurnDecision(
                turn,
                first.lineage,
                first.branch,
                Decision.DISCARDED,
                None,
                None,
                completed,
                tuple(intents),
                phases,
                home.terminal if home else None,
            )
        completed = tuple(state.committed)
        live_state = state

        def make(
            decision: Decision, resume_from: str | None = None, reason: str | None = None, line: int | None = None
        ) -> TurnDecision:
            return TurnDecision(
                turn,
                live_state.lineage,
                live_state.plan_branch,
                decision,
                resume_from,
                reason,
                completed,
                tuple(intents),
                live_state.phases,
                live_state.terminal,
                line,
            )

        if run_level is not None:
            return make(Decision.BLOCKED, reason=run_level.code, line=run_level.line)
        turn_level = [(line, code) for code, _b, _l, line in state.violations]
        for w in worlds:
            turn_level.extend((line, code) for line, code, *_ in w.violations)
        if turn_level:
            line, code = min(turn_level, key=lambda item: item[0])
            return make(Decision.BLOCKED, reason=code, line=line)
        for iv in intents:
            if iv.live and iv.resolution == Resolution.INDETERMINATE:
                return make(Decision.BLOCKED, reason=EFFECT_INDETERMINATE)
        if state.terminal is not None:
            return make(Decision.COMPLETE)
        if len(completed) == len(state.phases):
            return make(Decision.FINALIZE)
        return make(Decision.RESUME, resume_from=state.phases[len(completed)])


def _normalise_evidence(evidence: EvidenceMap | None) -> dict[Any, str]:
    out: dict[Any, str] = {}
    for key, value in (evidence or {}).items():
        out[key] = Evidence(value.value if isinstance(value, Evidence) else value).value
    return out


def assess(
    source: Source,
    *,
    expect: Mapping[int, int] | None = None,
    evidence: EvidenceMap | None = None,
) -> Assessment:
    """Assess a journal. ``source``: a path, a sequence of lines (bytes, no newline) in file order, or a
    callable returning a fresh iterable of lines. ``expect``: branch -> expected high-water lsn.
    ``evidence``: ``(turn, intent)`` or bare intent id -> ``Evidence``. Raises JournalUnreadable."""
    lines = iter_lines(source)
    assessor = _Assessor(_prescan(lines()))
    for line in lines():
        assessor.feed(line)
    return assessor.finish(dict(expect or {}), _normalise_evidence(evidence))


assess_path = assess


def fold_state(source: Source, branch: int, through_lsn: int) -> dict[str, Any]:
    """The canonical fold of ``branch``'s timeline through its own ``through_lsn`` (-1: only what it
    inherited). A runtime writes ``digest(fold_state(...))`` as a checkpoint's ``state_digest``."""
    lines = iter_lines(source)
    points = _prescan(lines())
    points[(branch, through_lsn)] += 1
    assessor = _Assessor(points)
    for line in lines():
        assessor.feed(line)
        snap = assessor.snapshots.get((branch, through_lsn))
        if snap is not None:
            return snap.to_canonical()
    raise ValueError(f"branch {branch} has no lsn {through_lsn} in this journal")


def rebuild_state(state: Mapping[str, Any], records_above: Iterable[bytes]) -> dict[str, Any]:
    """Rebuild a timeline's fold from a checkpoint's canonical ``state`` and then fold the records above
    it (the same branch's records after ``covers_lsn``, in order). Equals folding from lsn 0."""
    assessor = _Assessor(Counter())
    view = View.from_canonical(dict(state))
    for line in records_above:
        assessor.line_no += 1
        parsed = parse_line(line)
        obj = parsed.obj
        if obj is None or parsed.error is not None or not _is_int(obj.get("v")):
            raise ValueError(f"record {assessor.line_no} above the checkpoint is not a valid record")
        b, ln = obj.get("branch"), obj.get("lsn")
        if not (_is_int(b) and _is_int(ln)):
            raise ValueError(f"record {assessor.line_no} above the checkpoint has no valid branch and lsn")
        assessor.views[b] = view
        assessor.live = b
        if obj["v"] < view.schema:
            raise ValueError(f"record {assessor.line_no} above the checkpoint regresses the schema")
        view.schema = max(view.schema, obj["v"])
        if obj.get("kind") in ("fork", "checkpoint"):
            continue  # neither changes the fold of this timeline
        assessor._semantics(obj, obj["v"], b, ln, view)
    return view.to_canonical()


def state_digest(state: Mapping[str, Any]) -> str:
    return digest(dict(state))
