"""Writes contract-conforming journals for tests: lsns per branch, the v2 `prev` chain, forks.

Every helper appends one record (canonical bytes, as a conforming writer emits them) and returns its
object, so a test can then break exactly one thing with `raw()` or by passing fields explicitly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engine.canonical import canonical_bytes, digest

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class JournalBuilder:
    def __init__(self, run: str = "run-1", *, v: int = 2) -> None:
        self.run = run
        self.v = v
        self.lines: list[bytes] = []
        self.live = 0
        self._highest = 0
        self._next_lsn: dict[int, int] = {0: 0}
        self._last_digest: dict[int, str | None] = {0: None}

    # --- generic ---------------------------------------------------------------------------------------

    def record(self, kind: str, *, branch: int | None = None, **fields: Any) -> dict[str, Any]:
        branch = self.live if branch is None else branch
        lsn = self._next_lsn.get(branch, 0)
        obj: dict[str, Any] = {
            "v": self.v,
            "run": self.run,
            "branch": branch,
            "lsn": lsn,
            "kind": kind,
            "at": (_EPOCH + timedelta(seconds=len(self.lines))).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        prev = self._last_digest.get(branch)
        if self.v >= 2 and prev is not None:
            obj["prev"] = prev
        obj.update(fields)
        self.append(obj)
        self._next_lsn[branch] = lsn + 1
        self._last_digest[branch] = digest(obj)
        return obj

    def append(self, obj: dict[str, Any]) -> bytes:
        line = canonical_bytes(obj)
        self.lines.append(line)
        return line

    def raw(self, line: bytes) -> None:
        """Append arbitrary bytes as a line (torn writes, foreign formatting)."""
        self.lines.append(line)

    def body(self, lines: list[bytes] | None = None) -> bytes:
        return b"".join(line + b"\n" for line in (self.lines if lines is None else lines))

    # --- kinds -----------------------------------------------------------------------------------------

    def plan(self, turn: str, *, lineage: str = "root", phases: list[str] | None = None, **extra: Any) -> dict:
        fields: dict[str, Any] = {"turn": turn, "lineage": lineage, **extra}
        if phases is not None:
            fields["phases" if self.v >= 2 else "stages"] = phases
        return self.record("turn_planned", **fields)

    def commit(self, turn: str, *phases: str) -> list[dict]:
        return [self.record("phase_committed", turn=turn, phase=phase) for phase in phases]

    def dispatch(
        self, turn: str, intent: str, *, effect_class: str = "safe", idempotency_key: str | None = None, **extra: Any
    ) -> dict:
        fields: dict[str, Any] = {"turn": turn, "intent": intent, "effect_class": effect_class, **extra}
        if idempotency_key is not None:
            fields["idempotency_key"] = idempotency_key
        return self.record("intent_dispatched", **fields)

    def observe(self, turn: str, intent: str, outcome: str = "succeeded") -> dict:
        return self.record("effect_observed", turn=turn, intent=intent, outcome=outcome)

    def terminal(self, turn: str, status: str = "completed") -> dict:
        return self.record("turn_terminal", turn=turn, status=status)

    def fork(self, *, from_lsn: int, reason: str = "rewind") -> int:
        """A fork on the live branch; the new branch becomes live and chains from the fork record."""
        new_branch = self._highest + 1
        fork = self.record("fork", new_branch=new_branch, from_lsn=from_lsn, reason=reason)
        self._highest = new_branch
        self.live = new_branch
        self._next_lsn[new_branch] = 0
        self._last_digest[new_branch] = digest(fork)
        return new_branch

    def full_turn(self, turn: str, *, lineage: str = "root") -> None:
        """A turn planned with the default plan, every phase committed, and completed."""
        from engine.types import DEFAULT_PHASES

        self.plan(turn, lineage=lineage)
        self.commit(turn, *DEFAULT_PHASES)
        self.terminal(turn)
