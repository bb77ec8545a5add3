"""The door check: the run-level faults a batch of records would bring into a run, seen from the batch
alone and the stored head of each branch it writes on.

Ingest calls it on the records a batch would add (redeliveries already dropped). Under ``LoopX-Expect``
a fault refuses the batch (nothing stored: a writer that says where it stands is told at once, before
its typo blocks the run for good); without it the batch is stored as evidence and the answer lists the
faults. The assessment stays the judge: it reads the whole run and names what the door cannot see
(turn-level rules, a schema regression along a timeline, a checkpoint's digest, the fields each kind
requires). Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .assess import has_float, valid_at
from .types import KINDS, Code

# The door's faults whose remedy is the writer's chain (its lsn or its prev); the others are the record's.
CHAIN_CODES = frozenset({Code.LSN_GAP, Code.CHAIN_BROKEN, Code.FORK_INVALID})


@dataclass(frozen=True, slots=True)
class Head:
    """Where a branch stands in the store: ``lsn`` the last of its contiguous records (-1: none yet) and
    ``digest`` the digest of that record; for a branch with no record yet, the digest of the `fork` record
    that created it (None for branch 0, and for a branch no stored fork created)."""

    lsn: int
    digest: str | None


@dataclass(frozen=True, slots=True)
class DoorRecord:
    """One record of the batch: its 1-based line in the batch, its object, its digest, and the reason
    its line is not a valid record (a duplicate key, a lone surrogate, a float...) when reading found one."""

    line: int
    obj: dict[str, Any]
    digest: str
    invalid: str | None = None
    raw: bytes | None = None  # the line's bytes, when the caller has them: a cheaper float check


@dataclass(frozen=True, slots=True)
class DoorFault:
    code: str
    line: int
    branch: int
    lsn: int
    detail: str
    expected_lsn: int | None = None
    expected_prev: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": str(self.code),
            "line": self.line,
            "branch": self.branch,
            "lsn": self.lsn,
            "detail": self.detail,
        }


class _Times:
    """`at` checked as the engine does: a writer's times share their date, hour and minute with the previous
    record's and repeat their seconds, so both halves are remembered once proven."""

    __slots__ = ("prefix", "suffixes")

    def __init__(self) -> None:
        self.prefix = "\x00"
        self.suffixes: set[str] = set()

    def ok(self, at: Any) -> bool:
        if at.__class__ is not str:
            return False
        if at.startswith(self.prefix) and at[16:] in self.suffixes:
            return True
        if not valid_at(at):
            return False
        self.prefix = at[:16]
        if len(self.suffixes) < 4096:
            self.suffixes.add(at[16:])
        return True


def _record_fault(rec: DoorRecord, times: _Times) -> tuple[str, str] | None:
    """The first fault of the record itself, in the engine's check order, or None."""
    obj = rec.obj
    if rec.invalid is not None:
        return Code.RECORD_INVALID, rec.invalid
    v = obj.get("v")
    if type(v) is not int:
        return Code.RECORD_INVALID, "missing or non-integer schema version v"
    if v not in (1, 2):
        return Code.SCHEMA_UNSUPPORTED, f"schema version {v} is not supported (1 or 2)"
    kind = obj.get("kind")
    if type(kind) is not str:
        return Code.RECORD_INVALID, "missing or non-string kind"
    if not times.ok(obj.get("at")):
        return Code.RECORD_INVALID, "at is not an RFC 3339 time"
    if kind not in KINDS:
        return Code.KIND_UNKNOWN, "unknown record kind"
    # A float is spelled with "." or a signed exponent: only such a line can hold one.
    raw = rec.raw
    if (raw is None or b"." in raw or b"+" in raw or b"e-" in raw) and has_float(obj):
        return Code.RECORD_INVALID, "a float (numbers in records are integers)"
    return None


def _fork_fault(obj: dict[str, Any], b: int, ln: int, highest: int) -> tuple[str, str] | None:
    """The engine's rules of a fork record, with ``highest`` the highest branch created so far (the live
    one), or None when the fork holds."""
    new, from_lsn = obj.get("new_branch"), obj.get("from_lsn")
    if type(new) is not int or type(from_lsn) is not int or type(obj.get("reason")) is not str:
        return Code.RECORD_INVALID, "fork needs integer new_branch and from_lsn and a string reason"
    if b != highest:
        return Code.FORK_INVALID, f"the fork is on branch {b}, not on the live branch {highest}"
    if new != highest + 1:
        return Code.FORK_INVALID, f"new_branch must be {highest + 1}"
    if not -1 <= from_lsn < ln:
        return Code.FORK_INVALID, f"from_lsn must be between -1 and {ln - 1}"
    return None


def door_faults(
    records: Iterable[DoorRecord],
    heads: Mapping[int, Head],
    *,
    highest: int | None = None,
) -> list[DoorFault]:
    """Every fault the batch ``records`` (in batch order) would bring, in batch order; ``heads``: where each
    branch the batch writes on stands in the store (a branch missing from it has no record and no stored
    fork); ``highest``: the highest branch a stored fork created (the live branch), needed when the batch
    holds a fork (default: the highest of ``heads``)."""
    faults: list[DoorFault] = []
    live = max(heads, default=0) if highest is None else highest
    times = _Times()
    next_lsn: dict[int, int] = {b: h.lsn + 1 for b, h in heads.items()}
    last_digest: dict[int, str | None] = {b: h.digest for b, h in heads.items()}
    created: set[int] = {b for b, h in heads.items() if b == 0 or h.lsn >= 0 or h.digest is not None}
    for rec in records:
        obj = rec.obj
        b, ln = obj["branch"], obj["lsn"]
        fault = _record_fault(rec, times)
        if fault is not None:
            faults.append(DoorFault(fault[0], rec.line, b, ln, f"line {rec.line}: {fault[1]}"))
        if b not in created:
            faults.append(
                DoorFault(Code.FORK_INVALID, rec.line, b, ln, f"line {rec.line}: branch {b} was not created by a fork")
            )
            continue
        expected = next_lsn.get(b, 0)
        prev = last_digest.get(b)
        if ln != expected:
            faults.append(
                DoorFault(
                    Code.LSN_GAP,
                    rec.line,
                    b,
                    ln,
                    f"line {rec.line}: lsn {ln} on branch {b}, expected {expected}",
                    expected_lsn=expected,
                    expected_prev=prev,
                )
            )
        elif obj.get("v") == 2 and (("prev" in obj) if prev is None else obj.get("prev") != prev):
            why = "prev present on the first record of branch 0" if prev is None else "prev is not the digest of the"
            if prev is not None:
                why += f" record before it on branch {b}" if ln else f" fork record that created branch {b}"
            faults.append(
                DoorFault(
                    Code.CHAIN_BROKEN,
                    rec.line,
                    b,
                    ln,
                    f"line {rec.line}: {why}",
                    expected_lsn=expected,
                    expected_prev=prev,
                )
            )
        next_lsn[b] = max(expected, ln + 1)
        last_digest[b] = rec.digest
        if fault is None and obj.get("kind") == "fork":
            # As in the engine, only a fork whose record holds creates its branch.
            problem = _fork_fault(obj, b, ln, live)
            if problem is not None:
                faults.append(DoorFault(problem[0], rec.line, b, ln, f"line {rec.line}: {problem[1]}"))
            else:
                live = obj["new_branch"]
                created.add(live)
                next_lsn[live] = 0
                last_digest[live] = rec.digest
    return faults
