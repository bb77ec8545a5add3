"""A journal writer: the reference way to produce contract-conforming records.

Used by the tests, the demo data, the benchmarks and the reference runtime, so that every one of them
writes the same shapes. It keeps the hash chain, the lsn per branch and the live branch, writes v1 or v2
records (switch ``version`` mid-journal to model a runtime upgrade) and computes checkpoint digests with
the engine's own fold. Time comes from a clock passed in, never from the wall.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from .assess import Assessor, fold_state
from .canonical import canonical_bytes, digest
from .fold import View


def fixed_clock(start: datetime | None = None, step: timedelta = timedelta(seconds=1)) -> Callable[[], str]:
    """A deterministic clock: each call is one ``step`` later than the last."""
    current = start or datetime(2026, 1, 1, tzinfo=UTC)

    def tick() -> str:
        nonlocal current
        stamp = current
        current += step
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")

    return tick


class JournalWriter:
    def __init__(
        self,
        run: str,
        *,
        version: int = 2,
        clock: Callable[[], str] | None = None,
        sink: IO[bytes] | None = None,
        keep_lines: bool = True,
    ) -> None:
        self.run = run
        self.version = version
        self.clock = clock or fixed_clock()
        self.sink = sink
        self.keep_lines = keep_lines
        self.lines: list[bytes] = []
        self.branch = 0
        self.highest = 0
        self.next_lsn: dict[int, int] = {0: 0}
        self.last_digest: dict[int, str | None] = {0: None}
        # The writer folds what it writes, so that checkpoints cost O(turns), not O(records).
        self._fold = Assessor(Counter())

    # -- low level -------------------------------------------------------------------------------
    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one record of ``kind`` on the live branch; returns it as written."""
        branch = self.branch
        record: dict[str, Any] = {
            "v": self.version,
            "run": self.run,
            "branch": branch,
            "lsn": self.next_lsn[branch],
            "kind": kind,
            "at": self.clock(),
        }
        if self.version == 2 and self.last_digest[branch] is not None:
            record["prev"] = self.last_digest[branch]
        record.update(fields)
        self.write_raw(record)
        return record

    def write_raw(self, record: dict[str, Any]) -> bytes:
        """Write a record exactly as given (tests use it to write broken records)."""
        line = canonical_bytes(record)
        branch = record.get("branch")
        if isinstance(branch, int) and branch in self.next_lsn and isinstance(record.get("lsn"), int):
            self.next_lsn[branch] = max(self.next_lsn[branch], record["lsn"] + 1)
            self.last_digest[branch] = digest(record)
        self._emit(line)
        return line

    def _emit(self, line: bytes) -> None:
        if self.keep_lines:
            self.lines.append(line)
        if self.sink is not None:
            self.sink.write(line + b"\n")
        self._fold.feed(line)

    def mark(self) -> int:
        """Register the next record of the live branch as a future rewind point; returns its lsn."""
        lsn = self.next_lsn[self.branch]
        self._fold.add_point(self.branch, lsn)
        return lsn

    # -- records ---------------------------------------------------------------------------------
    def plan(self, turn: str, lineage: str | None = "lineage", phases: list[str] | None = None) -> dict[str, Any]:
        fields: dict[str, Any] = {"turn": turn}
        if lineage is not None:
            fields["lineage"] = lineage
        if phases is not None:
            fields["stages" if self.version == 1 else "phases"] = phases
        return self.append("turn_planned", **fields)

    def commit(self, turn: str, phase: str) -> dict[str, Any]:
        return self.append("phase_committed", turn=turn, phase=phase)

    def dispatch(
        self, turn: str, intent: str, effect_class: str, key: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {"turn": turn, "intent": intent, **extra}
        if self.version == 1:
            fields["unsafe"] = effect_class == "unsafe"
            if effect_class == "idempotent" and key is None:
                raise ValueError("a v1 idempotent intent is one with a key")
            if effect_class == "safe" and key is not None:
                raise ValueError("a v1 safe intent has no key")
        else:
            fields["effect_class"] = effect_class
        if key is not None:
            fields["idempotency_key"] = key
        return self.append("intent_dispatched", **fields)

    def observe(self, turn: str, intent: str, outcome: str) -> dict[str, Any]:
        return self.append("effect_observed", turn=turn, intent=intent, outcome=outcome)

    def terminal(self, turn: str, status: str = "completed") -> dict[str, Any]:
        return self.append("turn_terminal", turn=turn, status=status)

    def complete_turn(self, turn: str, lineage: str = "lineage", phases: list[str] | None = None) -> None:
        self.plan(turn, lineage, phases)
        for phase in phases or ["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"]:
            self.commit(turn, phase)
        self.terminal(turn)

    def fork(self, from_lsn: int, reason: str = "rewind") -> int:
        """Rewind the live branch to its own ``from_lsn``; returns the new live branch."""
        parent = self.branch
        new_branch = self.highest + 1
        if (parent, from_lsn) not in self._fold.snapshots:
            # Not marked in advance: rebuild that point by a fresh fold of what was written (slow path).
            self._fold.snapshots[(parent, from_lsn)] = View.from_canonical(
                fold_state(list(self.lines), parent, from_lsn)
            )
            self._fold.add_point(parent, from_lsn)
        self._fold.add_point(new_branch, -1)
        self.append("fork", new_branch=new_branch, from_lsn=from_lsn, reason=reason)
        fork_digest = self.last_digest[parent]
        self.highest = new_branch
        self.branch = new_branch
        self.next_lsn[new_branch] = 0
        self.last_digest[new_branch] = fork_digest
        return new_branch

    def checkpoint(self, *, with_state: bool = False) -> dict[str, Any]:
        """A checkpoint of the live timeline through its latest record."""
        covers = self.next_lsn[self.branch] - 1
        # The point is current: keep its fold, so the writer's own fold verifies the checkpoint like a
        # reader would (and the digest is computed on the snapshot, whose turn states no longer change).
        snap = self._fold.views[self.branch].snapshot()
        self._fold.add_point(self.branch, covers)
        self._fold.snapshots[(self.branch, covers)] = snap
        fields: dict[str, Any] = {"covers_lsn": covers, "state_digest": snap.digest(self._fold.digest_cache)}
        if with_state:
            fields["state"] = snap.to_canonical()
        return self.append("checkpoint", **fields)

    # -- output ----------------------------------------------------------------------------------
    def data(self) -> bytes:
        return b"".join(line + b"\n" for line in self.lines)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.lines)
