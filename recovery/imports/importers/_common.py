"""What every importer shares: the effect map, the typed refusal, the result types and the journal builder.

Pure Python (no Django): tests/engine/test_purity.py holds this package to it, as it holds the engine.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.assess import has_float
from engine.canonical import canonical_bytes, canonical_bytes_no_float

EFFECT_CLASSES = ("safe", "idempotent", "unsafe")
DEFAULT_KEY = "*"

Progress = Callable[[int, int], None]


class ImportRefused(ValueError):
    """The input is not a history of the kind named, or the effect map is not one: nothing is written.

    ``code`` is typed (``history_invalid``, ``effect_map_invalid``, ``source_unknown``); ``message`` is one
    line in words that never quotes the input's bytes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def refuse(message: str) -> ImportRefused:
    return ImportRefused("history_invalid", message)


@dataclass(frozen=True)
class ClassMap:
    """A name (an activity type, a Step Functions resource, a LangGraph node) to its effect class.

    ``entries`` never holds ``"*"``: that key sets ``default``, which is otherwise ``unsafe``."""

    entries: Mapping[str, str] = field(default_factory=dict)
    default: str = "unsafe"
    has_default_key: bool = False

    def classify(self, name: str | None) -> tuple[str, str | None]:
        """(class, the map key that decided it): the name itself, ``"*"`` when the map's own default
        decided, None when the map does not name it and has no ``"*"`` (so ``unsafe``: not in the map)."""
        if name is not None:
            found = self.entries.get(name)
            if found is not None:
                return found, name
        if self.has_default_key:
            return self.default, DEFAULT_KEY
        return self.default, None

    def first(self, names: tuple[str | None, ...]) -> tuple[str, str | None]:
        """The class of the first of ``names`` the map holds, else the default (Step Functions tries the
        resource, then the resource type, then the state's name)."""
        for name in names:
            if name is not None and name in self.entries:
                return self.entries[name], name
        return self.classify(None)


def effect_map_parse(obj: object) -> ClassMap:
    """An effect map from its JSON object; anything else is ``effect_map_invalid``."""
    if not isinstance(obj, dict):
        raise ImportRefused("effect_map_invalid", "the effect map is not a JSON object")
    entries: dict[str, str] = {}
    default = "unsafe"
    has_default = False
    for key, value in obj.items():
        if not isinstance(key, str):  # pragma: no cover - JSON object keys are strings
            raise ImportRefused("effect_map_invalid", "an effect map key is not a string")
        if not isinstance(value, str) or value not in EFFECT_CLASSES:
            raise ImportRefused(
                "effect_map_invalid", f"the effect map's value for {key!r} is not safe, idempotent or unsafe"
            )
        if key == DEFAULT_KEY:
            default, has_default = value, True
        else:
            entries[key] = value
    return ClassMap(entries=dict(sorted(entries.items())), default=default, has_default_key=has_default)


@dataclass(frozen=True)
class ConvertedRun:
    run: str
    journal: bytes
    records: int
    decided_by: Mapping[str, str | None]  # intent id -> the map key that set its class (None: not in the map)
    # The source's own ids of the run, by name (a Temporal workflow id and run id, a LangGraph thread id):
    # kept beside the journal by the import, never written into it (docs/imports.md, "Source words").
    origin: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportResult:
    source: str
    runs: list[ConvertedRun]
    skipped: Mapping[str, int]  # what the source held that the journal does not, by event type
    events: int  # the source's events (Temporal, Step Functions) or checkpoints and writes (LangGraph)
    sha256: str  # of the source file's bytes


def value_digest(value: Any) -> str:
    """sha256 hex of a value's canonical JSON (the contract's formula; orjson's when it holds no float,
    which gives the same bytes faster)."""
    raw = canonical_bytes(value) if has_float(value) else canonical_bytes_no_float(value)
    return hashlib.sha256(raw).hexdigest()


class Journal:
    """A v2 journal built in memory, record by record: lsn per branch, the `prev` chain, forks.

    Records are canonical bytes of values that hold no float (ids, names, words, digests), so orjson's
    sorted output is the contract's canonical form and the line's sha256 is the record's digest."""

    __slots__ = ("run", "lines", "branch", "highest", "next_lsn", "last_digest", "decided_by", "origin")

    def __init__(self, run: str) -> None:
        self.run = run
        self.lines: list[bytes] = []
        self.branch = 0
        self.highest = 0
        self.next_lsn: dict[int, int] = {0: 0}
        self.last_digest: dict[int, str | None] = {0: None}
        self.decided_by: dict[str, str | None] = {}
        self.origin: dict[str, str] = {}

    def add(self, kind: str, at: str | None, source_event: Any, fields: dict[str, Any]) -> int:
        """Append one record on the live branch; returns its lsn."""
        branch = self.branch
        lsn = self.next_lsn[branch]
        fields["v"] = 2
        fields["run"] = self.run
        fields["branch"] = branch
        fields["lsn"] = lsn
        fields["kind"] = kind
        fields["source_event"] = source_event
        if at is not None:
            fields["at"] = at
        prev = self.last_digest[branch]
        if prev is not None:
            fields["prev"] = prev
        # A copy of exactly its size: orjson's result keeps its whole write buffer (4 KiB a record).
        line = bytes(memoryview(canonical_bytes_no_float(fields)))
        self.lines.append(line)
        self.last_digest[branch] = hashlib.sha256(line).hexdigest()
        self.next_lsn[branch] = lsn + 1
        return lsn

    def fork(self, from_lsn: int, reason: str, at: str | None, source_event: Any) -> int:
        """Rewind the live branch to its own ``from_lsn`` (-1: only what it inherited); returns the new
        branch, which is live from here on."""
        new_branch = self.highest + 1
        self.add("fork", at, source_event, {"new_branch": new_branch, "from_lsn": from_lsn, "reason": reason})
        fork_digest = self.last_digest[self.branch]
        self.highest = new_branch
        self.branch = new_branch
        self.next_lsn[new_branch] = 0
        self.last_digest[new_branch] = fork_digest
        return new_branch

    def data(self) -> bytes:
        return b"\n".join(self.lines) + b"\n" if self.lines else b""

    def result(self) -> ConvertedRun:
        return ConvertedRun(
            run=self.run, journal=self.data(), records=len(self.lines), decided_by=self.decided_by, origin=self.origin
        )


SQLITE_HEADER = b"SQLite format 3\x00"


def sqlite_image_open(data: bytes) -> sqlite3.Connection:
    """A SQLite database read from its bytes in memory, read only (LangGraph's saver, DBOS's system database).
    A file that is not one is refused as ``history_invalid``."""
    if not data.startswith(SQLITE_HEADER) or len(data) < 100:
        raise refuse("not a SQLite database")
    image = bytearray(data)
    # A database in WAL mode (the saver sets it) says so in header bytes 18 and 19; an in-memory image
    # can only be read in the rollback journal's mode, which these two bytes select.
    image[18:20] = b"\x01\x01"
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(bytes(image))
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError:
        conn.close()
        raise refuse("not a readable SQLite database") from None
    return conn
