"""Assessment: a journal's committed prefix (plus operator evidence) in, one decision per turn out.

A pure function (docs/contract.md, section 6): the same bytes and evidence give byte-identical output,
and nothing here writes anywhere. The journal is read twice, record by record, never held in memory:

1. a cheap pre-scan finds the points that forks rewind to and checkpoints cover (only lines that can be
   fork or checkpoint records are parsed), so that
2. the main pass can snapshot each timeline's fold exactly there while it folds every record.

Memory therefore grows with the number of turns (times the number of branches), not with the number of
records. Run-level checks (shape, run, lsn, chain, schema, kinds, forks, checkpoints) are per record;
turn rules apply on the timeline of the record's branch; effects (dispatches and readbacks) go into a
world ledger shared by all branches, because a side effect is a fact about the world, not about a branch.

Speed: the main pass is the hot path (benchmarks/bench_engine.py). A record that a conforming writer
wrote (canonical bytes, every run-level check passing) goes through a straight-line fast path: one orjson
parse, one re-serialisation compared with the raw bytes (which proves canonical form, no duplicate key, no
big integer), one sha256 over the raw bytes (they *are* the canonical bytes), and then the turn rules of
its kind, the same methods every record goes through (each rule of the contract is written once).
Anything unusual falls back to the general code, which classifies precisely; both give the same result
(tests/engine: the properties and the receipt tests run every path).
"""

from __future__ import annotations

import gc
import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from itertools import chain, islice
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Final, NamedTuple, TypeGuard

from .canonical import HAVE_ORJSON, digest, digest_no_float, parse_strict
from .canonical import is_int as _is_int
from .fold import (
    DigestCache,
    IntentEntry,
    TurnState,
    View,
    merge_outcome,
)
from .rewind import UndoLog, turns_since
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
    Evidence,
    IntentView,
    Resolution,
    SnapshotUnusable,
    TurnDecision,
    Violation,
)

if HAVE_ORJSON:
    import orjson

    _loads: Callable[[bytes], Any] | None = orjson.loads
    _dumps = orjson.dumps
    _SORT_KEYS = orjson.OPT_SORT_KEYS
    _dumps_sorted = partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)
    _DecodeError: type[Exception] = orjson.JSONDecodeError
else:  # pragma: no cover - exercised only on installs without orjson
    _loads = None
    _DecodeError = ValueError

# Bumped whenever a decision for the same input could change; stored beside every assessment.
ENGINE_VERSION = "1.1.0"
# The shape of the canonical fold (docs/engine.md, "The canonical fold"), which checkpoint digests digest:
# bumped only when folding the same records could give other bytes (ENGINE_VERSION is bumped then too),
# spelled as the engine release in which the shape last changed (1.1.0: `unplanned`).
PROJECTION_VERSION = "1.1.0"

Source = str | os.PathLike[str] | Sequence[bytes] | Callable[[], Iterable[bytes]]
EvidenceMap = Mapping[Any, Any]  # (turn, intent) or intent id -> finding, or (finding, dispatch number) pairs

# The members that deciding reads once per turn and intent, as constants: an Enum class has a __getattr__,
# which makes each `Decision.RESUME` about ten times as slow as reading a global.
_BLOCKED: Final = Decision.BLOCKED
_COMPLETE: Final = Decision.COMPLETE
_DISCARDED: Final = Decision.DISCARDED
_FINALIZE: Final = Decision.FINALIZE
_RESUME: Final = Decision.RESUME
_SETTLED: Final = Resolution.SETTLED
_REPLAY: Final = Resolution.REPLAY
_REISSUE: Final = Resolution.REISSUE
_INDETERMINATE: Final = Resolution.INDETERMINATE
_HAPPENED: Final = Evidence.HAPPENED
_NOT_HAPPENED: Final = Evidence.NOT_HAPPENED

# RFC 3339 date-time (section 5.6), ASCII digits only ([0-9], not \d, which matches every script's digits),
# matched whole (fullmatch: "$" would accept a trailing newline), with the field ranges of the RFC; the
# day is checked against its month by valid_at.
_RFC3339 = re.compile(
    r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)"
    r"(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)
_MONTH_DAYS: Final = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DEFINITIVE: Final = frozenset({"succeeded", "failed"})
# The words the contract allows, each mapped to one shared object: a record's word is checked and then
# stored as the shared one (100,000 turns would otherwise keep 100,000 copies of "completed").
_OUTCOMES: Final = {w: w for w in ("succeeded", "failed", "unknown")}
_CLASSES: Final = {w: w for w in ("safe", "idempotent", "unsafe")}
_STATUSES: Final = {w: w for w in sorted(TERMINAL_STATUSES)}
# A fork names `from_lsn`, a checkpoint `covers_lsn`: a line that is either holds "_lsn", or spells the key
# with an escape and so holds a backslash. Two searches at C speed find every candidate; ordinary records
# hold neither. (re finds "_lsn" in JSON text faster than bytes.find, whose skips its common letters
# defeat; a backslash is one byte, which find hands to memchr.)
_LSN_SEARCH = re.compile(rb"_lsn").search


def _find_lsn(buf: bytearray, start: int, end: int) -> int:
    m = _LSN_SEARCH(buf, start, end)
    return -1 if m is None else m.start()


def _find_backslash(buf: bytearray, start: int, end: int) -> int:
    return buf.find(b"\\", start, end)


_PRESCAN_MARKERS = (_find_lsn, _find_backslash)
# A float as orjson writes it holds a "." or an exponent with a sign and a digit ("1e+20", "1e-7"); a block
# holding none of ".", "+" and "e-<digit>" holds no float. re finds the last faster than bytes.find does, and
# faster still when the pattern starts at the "-" (rarer in JSON text than "e") and looks back for the "e".
_NEGATIVE_EXPONENT = re.compile(rb"-(?<=e-)[0-9]").search
_BLOCK: Final = 1 << 16  # bytes read at a time: large enough to be cheap, small enough not to matter in memory
_LINES_PER_BATCH: Final = 256
_PARSE_LINES: Final = 64  # lines parsed (and held) at a time by the main pass: see parse_batch
_PRESCAN_BLOCK = 1 << 17
_INVALID_DIGEST: Final = hashlib.sha256(b"\x00invalid").hexdigest()  # chains after a record without canonical bytes
_AT_CACHE_LIMIT: Final = 4096
_ABSENT: Final = object()  # a field that is not there (a null `prev` is present, and wrong)
_sha256 = hashlib.sha256


def _orjson_key(name: str) -> str:
    """The name as the str object orjson hands out for that key (it keeps one object per key it has read):
    a record's field looked up by that very object is found by identity, not by comparing strings. The
    same lookup either way (should orjson ever hand out another object, it is merely slower)."""
    if not HAVE_ORJSON:  # pragma: no cover - installs without orjson
        return name
    (key,) = orjson.loads(b'{"%s":0}' % name.encode())
    assert key == name
    return str(key)


# The fields the fast path reads. Final: compiled (engine/compiled.py), each is a constant, not a global.
_K_AT: Final = _orjson_key("at")
_K_BRANCH: Final = _orjson_key("branch")
_K_KIND: Final = _orjson_key("kind")
_K_LSN: Final = _orjson_key("lsn")
_K_RUN: Final = _orjson_key("run")
_K_V: Final = _orjson_key("v")
_K_ARGS_DIGEST: Final = _orjson_key("args_digest")
_K_EFFECT_CLASS: Final = _orjson_key("effect_class")
_K_IDEMPOTENCY_KEY: Final = _orjson_key("idempotency_key")
_K_INTENT: Final = _orjson_key("intent")
_K_LINEAGE: Final = _orjson_key("lineage")
_K_OUTCOME: Final = _orjson_key("outcome")
_K_PHASE: Final = _orjson_key("phase")
_K_PHASES: Final = _orjson_key("phases")
_K_PREV: Final = _orjson_key("prev")
_K_STAGES: Final = _orjson_key("stages")
_K_STATUS: Final = _orjson_key("status")
_K_TURN: Final = _orjson_key("turn")


class JournalUnreadable(Exception):
    """The journal cannot be read at all (missing file, a directory, no permission)."""


def _nonempty_str(value: Any) -> TypeGuard[str]:
    return type(value) is str and value != ""


def valid_at(at: Any) -> TypeGuard[str]:
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


def _known_kind(kind: str) -> bool:
    """``kind in KINDS``, by comparing it with each kind, the commonest first (about two comparisons for a
    record). A record's kind is a new string: a set would first hash it. tests/engine holds the two equal."""
    return (
        kind == "phase_committed"
        or kind == "intent_dispatched"
        or kind == "effect_observed"
        or kind == "turn_planned"
        or kind == "turn_terminal"
        or kind == "checkpoint"
        or kind == "fork"
    )


def _chain_holds(obj: dict[str, Any], v: Any, expected: str | None) -> bool:
    """The hash chain (v2 only; a v1 record's prev is ignored): `prev` is the digest of the branch's
    previous record (`expected`), and absent from the first record of branch 0 (`expected` None)."""
    if v != 2:
        return True
    if expected is None:
        return _K_PREV not in obj
    prev = obj.get(_K_PREV)
    return type(prev) is str and prev == expected


def _turn_of(obj: dict[str, Any], error: str | None) -> str | None:
    """The turn a violation names: the record's `turn` when it is a string. An invalid record's turn may
    hold a lone surrogate: it is then not named, so the output stays encodable (and never quotes what
    could not be read)."""
    turn = obj.get("turn")
    if type(turn) is not str:
        return None
    if error is not None:
        try:
            turn.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return turn


def has_float(value: Any) -> bool:
    """Any float at any depth of an orjson-parsed value (orjson already refused lone surrogates)."""
    stack = [value]
    while stack:
        item = stack.pop()
        cls = item.__class__
        if cls is float:
            return True
        if cls is dict:
            stack.extend(item.values())
        elif cls is list:
            stack.extend(item)
    return False


# -- sources -----------------------------------------------------------------------------------------------


def _path_of(source: Source) -> Path | None:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise JournalUnreadable(f"cannot read {path.name}: {exc.strerror or exc}") from exc
        return path
    return None


def _blocks(path: Path) -> Iterator[bytes]:
    """The file in blocks that end at a line boundary (the last one may end without a newline)."""
    with open(path, "rb") as fh:
        pending: list[bytes] = []
        while block := fh.read(_BLOCK):
            cut = block.rfind(b"\n")
            if cut < 0:
                pending.append(block)  # a very long line: keep collecting, never re-copy
                continue
            head = block[: cut + 1]
            yield b"".join((*pending, head)) if pending else head
            rest = block[cut + 1 :]
            pending = [rest] if rest else []
        if pending:
            yield b"".join(pending)


class _Reader:
    """A journal source, readable as often as needed: in raw blocks of whole lines (the pre-scan searches
    them at C speed) or in batches of lines (bytes, no newline), in file order."""

    def __init__(self, source: Source) -> None:
        self.path = _path_of(source)
        self.source = source

    def chunks(self) -> Iterator[tuple[bytes | None, list[bytes]]]:
        """(the raw block or None, its lines): a file in blocks, anything else in lists of a few thousand
        lines (feed_batch maps over a batch several times, so a batch is a list, never a generator)."""
        if self.path is not None:
            for block in _blocks(self.path):
                lines = block.split(b"\n")
                if block.endswith(b"\n"):
                    lines.pop()  # the newline ends the last line; it does not start another
                yield block, lines
            return
        if callable(self.source):
            lines_in: Iterable[bytes] = self.source()
        else:
            assert not isinstance(self.source, (str, os.PathLike))
            lines_in = self.source
        iterator = iter(lines_in)
        while batch := list(islice(iterator, _LINES_PER_BATCH)):
            yield None, batch

    def batches(self) -> Iterator[list[bytes]]:
        for _, lines in self.chunks():
            yield lines

    def prescan(self) -> Counter[tuple[int, int]]:
        if self.path is not None:
            return _prescan_file(self.path)
        return _prescan_lines(chain.from_iterable(self.batches()))


# -- state ---------------------------------------------------------------------------------------------------


# The fields of a world-ledger entry, in the order a fold snapshot writes them (WORLD_ROW).
_WORLD_FIELDS: Final = (
    "turn",
    "intent",
    "first_line",
    "count",
    "first_class",
    "first_key",
    "branch",
    "lsn",
    "effect_class",
    "key",
    "outcome",
    "bound",
    "first_branch",
    "first_lsn",
    "more_firsts",
    "violations",
)


class _World:
    """One intent (named by turn and id) in the world ledger, across every branch, in O(1) memory whatever
    the number of its dispatches and readbacks: the first dispatch's class and key (a retry must keep
    them), the latest dispatch (which a readback is about and which describes the intent), where evidence
    binds, and the first dispatch on each branch (enough to tell whether any is on the live timeline)."""

    __slots__ = _WORLD_FIELDS

    def __init__(self, turn: str, intent: str, first_line: int) -> None:
        self.turn = turn
        self.intent = intent
        self.first_line = first_line
        self.count = 0  # dispatches
        self.first_class = ""
        self.first_key: str | None = None
        self.branch = -1  # the latest dispatch: branch, lsn, class, key, merged readback
        self.lsn = -1
        self.effect_class = ""
        self.key: str | None = None
        self.outcome: str | None = None
        # Operator evidence is about the first dispatch without a definitive readback: the index of the
        # first *earlier* one (its readbacks are final once another dispatch follows), else None.
        self.bound: int | None = None
        # The first dispatch on each branch (enough to tell whether any is on the live timeline): the first
        # one, and (branch, lsn, branch, lsn, ...) for any further branch, rare.
        self.first_branch = -1
        self.first_lsn = -1
        self.more_firsts: tuple[int, ...] = ()
        self.violations: list[tuple[int, str]] | None = None  # (line, code)

    def evidence_bound(self) -> int | None:
        if self.bound is not None:
            return self.bound
        return self.count - 1 if self.count and self.outcome not in _DEFINITIVE else None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> _World:
        """The entry WORLD_ROW read (a fold snapshot): every slot set once, in slot order."""
        world = cls(row[0], row[1], row[2])
        (
            _,
            _,
            _,
            world.count,
            world.first_class,
            world.first_key,
            world.branch,
            world.lsn,
            world.effect_class,
            world.key,
            world.outcome,
            world.bound,
            world.first_branch,
            world.first_lsn,
            more_firsts,
            violations,
        ) = row
        world.more_firsts = tuple(more_firsts)
        world.violations = None if violations is None else [(line, Code(code)) for line, code in violations]
        return world


WORLD_ROW = attrgetter(*_WORLD_FIELDS)  # an entry's fields in slot order, in one C call
WorldEntry = _World  # the entry's type, for engine/parts.py, which writes and reads entries


class _Branch:
    __slots__ = (
        "branch",
        "parent",
        "from_lsn",
        "fork_lsn",
        "next_lsn",
        "last_digest",
        "discarded_from",
        "dirty_at",
        "points",
        "undo",
    )

    def __init__(
        self,
        branch: int,
        parent: int | None,
        from_lsn: int | None,
        fork_lsn: int | None,
        last_digest: str | None,
        points: set[int],
    ) -> None:
        self.branch = branch
        self.parent = parent
        self.from_lsn = from_lsn
        self.fork_lsn = fork_lsn
        self.next_lsn = 0
        self.last_digest = last_digest
        self.discarded_from: int | None = None
        # next_lsn when a record at an lsn already read was folded: while it still is, the branch's view is
        # no longer its fold through next_lsn - 1 (a resumed fold cannot serve that point from it).
        self.dirty_at: int | None = None
        self.points = points  # own lsns whose fold a later fork or checkpoint needs (shared, may grow)
        self.undo: UndoLog | None = None  # a resumed fold's way back to points it did not keep (rewind.py)

    def row(self) -> list[Any]:
        return [
            self.branch,
            self.parent,
            self.from_lsn,
            self.fork_lsn,
            self.next_lsn,
            self.last_digest,
            self.discarded_from,
            self.dirty_at,
        ]

    @classmethod
    def from_row(cls, row: Sequence[Any], points: set[int]) -> _Branch:
        branch, parent, from_lsn, fork_lsn, next_lsn, last_digest, discarded_from, dirty_at = row
        info = cls(branch, parent, from_lsn, fork_lsn, last_digest, points)
        info.next_lsn, info.discarded_from, info.dirty_at = next_lsn, discarded_from, dirty_at
        return info


# The start of a fork or checkpoint as a conforming writer spells it (canonical: keys sorted, no spaces);
# enough to learn its point without parsing the rest (a checkpoint's state may be megabytes).
_POINT_PREFIX = re.compile(
    rb'\{"at":"[^"\\]*","branch":(0|[1-9][0-9]*),"(?:covers_lsn|from_lsn)":(-1|0|[1-9][0-9]*),"kind":"(?:checkpoint|fork)"'
)


def _note_point(points: Counter[tuple[int, int]], line: bytes) -> None:
    m = _POINT_PREFIX.match(line)
    if m is not None:
        # A hint, like every pre-scan result: the main pass checks the record in full, and a wrong or
        # extra point costs at most a snapshot.
        points[(int(m.group(1)), int(m.group(2)))] += 1
        return
    obj: Any = None
    if _loads is not None:
        try:
            obj = _loads(line)
        except _DecodeError:
            obj = None
    if obj is None:
        obj = parse_strict(line).obj  # what orjson refuses may still be an object (a big integer, say)
    if obj.__class__ is not dict:
        return
    kind, branch = obj.get("kind"), obj.get("branch")
    if not _is_int(branch):
        return
    if kind == "fork" and _is_int(obj.get("from_lsn")):
        points[(branch, obj["from_lsn"])] += 1
    elif kind == "checkpoint" and _is_int(obj.get("covers_lsn")):
        points[(branch, obj["covers_lsn"])] += 1


def _loads_or_none(line: bytes) -> Any:
    assert _loads is not None
    try:
        return _loads(line)
    except _DecodeError:
        return None


def named_turns(source: Source) -> set[str] | None:
    """The turns that the lines of ``source`` name (a string ``turn`` in a JSON object), or None when a line
    could not be read quickly (orjson refuses it): then any turn may be named. A record changes the fold of
    no other turn (the world ledger is keyed by turn too), which is what ``finish(only=...)`` relies on."""
    named: set[str] = set()
    for batch in _Reader(source).batches():
        for line in batch:
            obj = _loads_or_none(line)
            if obj is None:
                return None
            if obj.__class__ is dict:
                turn = obj.get("turn")
                if turn.__class__ is str:
                    named.add(turn)
    return named


def parse_batch(lines: Sequence[bytes]) -> tuple[list[Any], bool]:
    """Each line parsed on its own (None where orjson refuses it), and whether every line is proven to be
    the canonical bytes of its value, by one serialisation of the whole batch instead of one per line.

    Why one comparison proves it for every line: say ``dumps(objs) == b"[" + b",".join(lines) + b"]"``,
    each ``objs[i]`` parsed from ``lines[i]`` alone. Take the first i where ``c_i = dumps(objs[i])`` differs
    from ``lines[i]``; both start at the same offset, so one is a proper prefix of the other. If ``c_i`` is,
    ``lines[i]`` goes on with a comma after a complete value: not one JSON text, yet it parsed. If
    ``lines[i]`` is, then ``c_i``, read from its start, holds the complete value ``lines[i]`` and then a comma
    (never whitespace: canonical bytes hold none), so ``c_i`` is not one JSON text, yet orjson wrote it.
    Either way a contradiction: every line equals its canonical bytes, as the per-line check would prove."""
    assert _loads is not None
    try:
        objs = list(map(_loads, lines))
    except _DecodeError:
        return [_loads_or_none(line) for line in lines], False  # checked line by line
    return objs, proven_canonical(objs, lines)


def proven_canonical(objs: Sequence[Any], lines: Sequence[bytes]) -> bool:
    """Whether every line is the canonical bytes of its value, ``objs[i]`` being ``lines[i]`` parsed on its
    own: one serialisation of the whole list (the proof in ``parse_batch``). Ingest's streamed path parses
    chunk by chunk and proves the whole batch once, after its rows are sent."""
    try:
        return bool(_dumps_sorted(objs) == b"[" + b",".join(lines) + b"]")
    except TypeError:  # orjson.JSONEncodeError: something it reads but will not write (nesting, say)
        return False


def _prescan_lines(lines: Iterable[bytes]) -> Counter[tuple[int, int]]:
    """Points (branch, lsn) whose fold a later fork or checkpoint needs, counted by how many need it.
    Only lines that could be fork or checkpoint records are parsed."""
    points: Counter[tuple[int, int]] = Counter()
    for line in lines:
        if line.find(b"_lsn") >= 0 or line.find(b"\\") >= 0:
            _note_point(points, line)
    return points


def _prescan_file(path: Path) -> Counter[tuple[int, int]]:
    """The same for a file, searching it in 128 KiB windows of whole lines for the markers and parsing only
    the lines around them. One buffer is read into over and over (no allocation per block); a line longer
    than the buffer grows it, until the long line has been searched."""
    points: Counter[tuple[int, int]] = Counter()
    buf = bytearray(_PRESCAN_BLOCK)
    kept = 0  # bytes at the start of buf: the unfinished last line of the previous window
    with open(path, "rb", buffering=0) as fh:
        while True:
            if kept == len(buf):
                buf.extend(bytes(len(buf)))  # one line longer than the buffer
            got = fh.readinto(memoryview(buf)[kept:])
            size = kept + (got or 0)
            if not got:
                end = size  # the end of the file: the last line may end without a newline
            else:
                end = buf.rfind(b"\n", 0, size) + 1  # whole lines only
                if end == 0:
                    kept = size
                    continue
            starts: set[int] = set()  # a line with both markers is noted once
            for find in _PRESCAN_MARKERS:
                at = find(buf, 0, end)
                while at >= 0:
                    start = buf.rfind(b"\n", 0, at) + 1
                    stop = buf.find(b"\n", at, end)
                    stop = end if stop < 0 else stop
                    if start not in starts:
                        starts.add(start)
                        _note_point(points, bytes(buf[start:stop]))
                    at = find(buf, stop, end)
            if not got:
                return points
            kept = size - end
            if len(buf) > _PRESCAN_BLOCK and kept < _PRESCAN_BLOCK:
                # Back to the small buffer after a long line: searched while it is still in the CPU's cache
                # (right after the read), a small window is several times faster than a large one.
                small = bytearray(_PRESCAN_BLOCK)
                small[:kept] = buf[end:size]
                buf = small
                continue
            buf[:kept] = buf[end:size]


class Assessor:
    def __init__(self, points: Counter[tuple[int, int]], evidence: Mapping[Any, Any] | None = None) -> None:
        self.points = points
        self.evidence = evidence or {}
        self.snapshots: dict[tuple[int, int], View] = {}
        self.run: str | None = None
        self.records = 0
        self.violations: list[Violation] = []
        self._point_lsns: dict[int, set[int]] = {}
        for b, lsn in points:
            self._point_lsns.setdefault(b, set()).add(lsn)
        self.branches: dict[int, _Branch] = {
            0: _Branch(0, None, None, None, None, self._point_lsns.setdefault(0, set()))
        }
        self.views: dict[int, View] = {0: View()}
        self.live = 0
        self.world: dict[tuple[str, str], _World] = {}
        # The ledger's entries by turn, each turn's in the ledger's order, for its first ``_world_indexed``
        # entries (the ledger only grows): a batch decides its own turns from their entries alone, not by
        # reading the whole ledger, which grows with the run.
        self._world_of: dict[str, list[_World]] = {}
        self._world_indexed = 0
        self.turns_first: dict[str, tuple[int, str | None, int]] = {}  # turn -> (line, lineage, branch)
        self.checkpoints: list[dict[str, Any]] = []
        self.line_no = 0
        self._plans: dict[tuple[str, ...], tuple[str, ...]] = {_DEFAULT_PHASES: _DEFAULT_PHASES}
        self.digest_cache = DigestCache()  # checkpoints resume hashing where the fold changed
        self._names: dict[str, str] = {}  # lineages and intent ids, one object each
        # "YYYY-MM-DDTHH:MM" of the last valid `at` (never a prefix of an invalid one: it starts empty but
        # then no suffix is known, so the first time is always checked in full).
        self._at_prefix = ""
        self._at_suffixes: set[str] = set()  # ":SS[.frac](Z|+HH:MM)" seen valid
        self._last_at: str | None = None  # the last `at` the fast path proved valid (records share their time)
        self._last_turn = ""  # the last turn the fast path read, as the string object first read for it
        # Points behind a resumed fold's heads that it does not hold (resume_points): needing one raises.
        self.unreachable: set[tuple[int, int]] = set()
        # What the last fold snapshot wrote of this fold, part by part (engine/parts.py): a fold kept in
        # memory writes again only the parts whose turns the lines since named.
        self.sealed: Any = None
        self.rewind_window = 0  # records per branch that a resumed fold can undo (incremental.undo_logs_keep)
        # The turns whose fold the forks of this batch left behind (None: not known), for incremental.py.
        self.forked_turns: set[str] | None = None
        self._take_snapshot(0, -1)

    # -- helpers -----------------------------------------------------------------------------------------
    def add_point(self, branch: int, lsn: int) -> None:
        """Ask for the fold of (branch, lsn) to be kept for a later fork or checkpoint (the writer uses
        this to mark rewind points in advance)."""
        self.points[(branch, lsn)] += 1
        self._point_lsns.setdefault(branch, set()).add(lsn)  # the set a branch holds (or will hold)

    # -- fold snapshots (engine/incremental.py, engine/parts.py) ------------------------------------------
    def head_rows(self) -> list[Any]:
        """The fold's run-level rows after its last line, as plain JSON values in a fixed order: the same
        fold gives the same rows. The per-turn state (views, world ledger, first plannings) is written by
        engine/parts.py. Left out, since they only make it faster: the checkpoints' digest cache, the `at`
        cache, the last turn read, the shared copies of names and plans (rebuilt as it goes on), spent points."""
        return [
            self.run,
            self.records,
            self.line_no,
            self.live,
            [[v.code, v.branch, v.lsn, v.turn, v.detail, v.line] for v in self.violations],
            [info.row() for _, info in sorted(self.branches.items())],
            sorted([b, ln, n] for (b, ln), n in self.points.items() if n > 0),
            [[c["branch"], c["lsn"], c["covers_lsn"], c["verified"]] for c in self.checkpoints],
        ]

    @classmethod
    def from_head_rows(cls, rows: Sequence[Any], evidence: Mapping[Any, Any]) -> Assessor:
        """A fold with the run-level rows ``head_rows`` wrote and no turn yet (engine/parts.py reads those)."""
        run, records, line_no, live, violations, branches, points, ckpts = rows
        self = cls(Counter({(b, ln): n for b, ln, n in points}), evidence)
        self.run, self.records, self.line_no, self.live = run, records, line_no, live
        self.violations = [Violation(Code(c), b, ln, turn, detail, line) for c, b, ln, turn, detail, line in violations]
        self.branches = {row[0]: _Branch.from_row(row, self._point_lsns.setdefault(row[0], set())) for row in branches}
        self.checkpoints = [{"branch": b, "lsn": ln, "covers_lsn": c, "verified": ok} for b, ln, c, ok in ckpts]
        return self

    def shared_plan(self, plan: Sequence[str]) -> tuple[str, ...]:
        """One object per phase plan read back: turns planned later share it."""
        phases = tuple(plan)
        return self._plans.setdefault(phases, phases)

    def resume_points(self, points: Counter[tuple[int, int]]) -> None:
        """Points that the lines after a resumed fold's last line need (their pre-scan). A point ahead of its
        branch's head is kept when it is reached, as in any fold. The head itself, while the branch's view
        is still its fold through it, is kept now. A point behind the head that is not kept already is
        marked unreachable: a fork or checkpoint that needs it raises SnapshotUnusable."""
        for (b, ln), n in sorted(points.items()):
            self.points[(b, ln)] += n
            self._point_lsns.setdefault(b, set()).add(ln)
            info = self.branches.get(b)
            if info is None or ln >= info.next_lsn or (b, ln) in self.snapshots:
                continue
            if ln == info.next_lsn - 1 and info.dirty_at != info.next_lsn:
                self.snapshots[(b, ln)] = self.views[b].snapshot()
            else:
                self.unreachable.add((b, ln))

    def settle_points(self) -> None:
        """The points as a fold read back from its snapshot would hold them: those already used dropped (a spent point
        would otherwise keep a fold if its lsn were read again) and the unreachable ones of the batch before
        forgotten (the next batch's pre-scan finds its own). For a fold kept in memory (engine/warm.py)."""
        for point in [point for point, n in self.points.items() if n <= 0]:
            del self.points[point]
        for b, lsns in self._point_lsns.items():
            lsns.intersection_update({ln for pb, ln in self.points if pb == b})
        self.unreachable.clear()

    def _violate(self, code: str, branch: int | None, lsn: int | None, turn: str | None, detail: str) -> None:
        self.violations.append(Violation(code, branch, lsn, turn, detail, self.line_no))

    def _take_snapshot(self, branch: int, lsn: int) -> None:
        if (branch, lsn) in self.points and (branch, lsn) not in self.snapshots:
            self.snapshots[(branch, lsn)] = self.views[branch].snapshot()

    def _use_snapshot(self, branch: int, lsn: int, *, to_write: bool = False) -> View | None:
        snap = self.snapshots.get((branch, lsn))
        if snap is None:
            if (branch, lsn) not in self.unreachable:
                return None
            # A fold from the start would hold this point (its pre-scan reads the whole journal); the
            # branch's undo log may still reach it.
            log = self.branches[branch].undo
            snap = log.rewound(self.views[branch], lsn) if log is not None else None
            if snap is None:
                raise SnapshotUnusable(
                    "fork_into_past" if to_write else "checkpoint_into_past",
                    f"line {self.line_no} needs the fold of branch {branch} at lsn {lsn}, which was not kept",
                )
            self.unreachable.discard((branch, lsn))
            self.snapshots[(branch, lsn)] = snap
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
        state.violations += ((code, branch, lsn, self.line_no),)
        self._violate(code, branch, lsn, turn, detail)

    def _world_violation(self, world: _World, code: str, b: int, ln: int, detail: str) -> None:
        if world.violations is None:
            world.violations = []
        world.violations.append((self.line_no, code))
        self._violate(code, b, ln, world.turn, detail)

    def _at_ok(self, at: Any) -> bool:
        """`at` is RFC 3339. A writer's times share their date, hour and minute with the previous record's
        and repeat their seconds, so both halves are remembered once proven (the full check runs otherwise)."""
        if type(at) is not str:
            return False
        if at.startswith(self._at_prefix) and at[16:] in self._at_suffixes:
            return True
        if not valid_at(at):
            return False
        self._at_prefix = at[:16]
        if len(self._at_suffixes) < _AT_CACHE_LIMIT:
            self._at_suffixes.add(at[16:])
        return True

    # -- the main pass -------------------------------------------------------------------------------------
    def feed(self, line: bytes) -> None:
        """Fold one line (the writer and fold_state feed line by line)."""
        self.feed_batch([line])  # no block: each line is searched for float markers itself

    def feed_batch(self, lines: Sequence[bytes], block: bytes | None = None) -> None:
        """Fold lines in file order (`block`: the same lines as one buffer, when the reader has it).

        This is the hot path of every assessment (benchmarks/bench_engine.py). For a record that a
        conforming writer wrote, the run-level checks run as straight-line code over local variables (the
        float markers searched once per block rather than per line); when they all pass, the record goes to
        the turn rules every record goes through (_turn_rule). Anything else goes, before anything has been
        changed, to _feed_general, which classifies precisely; tests/engine runs every path and compares the
        results with an independent model. The lines are parsed and proven canonical a few dozen at a time
        (parse_batch: one serialisation and one comparison for all of them, not one per line), few enough
        that the parsed records held at once cost next to no memory."""
        if _loads is None:  # pragma: no cover - installs without orjson
            for line in lines:
                self.line_no += 1
                self._feed_general(line)
            return
        # Equal bytes prove: one value, canonical form, no duplicate key, no big integer turned float,
        # nothing re-escaped. A float in orjson's spelling has a "." or an exponent with a sign ("1e+20",
        # "1e-07"): a line with one of those takes the general path, which walks the object. A block
        # without any of them has no float at all (one search instead of three per line).
        check_marks = not (
            block is not None and block.find(b".") < 0 and block.find(b"+") < 0 and _NEGATIVE_EXPONENT(block) is None
        )
        batch = lines if isinstance(lines, list) else list(lines)  # a list: compiled, read by index in C
        if len(batch) <= _PARSE_LINES:
            self._fold_lines(batch, check_marks)
            return
        for start in range(0, len(batch), _PARSE_LINES):
            self._fold_lines(batch[start : start + _PARSE_LINES], check_marks)

    def _fold_lines(self, lines: list[bytes], check_marks: bool) -> None:
        """feed_batch's work on a few dozen lines (`check_marks`: a line may hold a float).

        Only the run-level checks are here, as one conjunction over local variables (the classification of
        a record that fails one is _record's); every record that passes them goes to the same turn rules
        as any other (_turn_rule, or _semantics for the rest), so a rule of the contract is written once, in
        its kind's method. Types are tested with ``type(x) is``, which narrows them: compiled (engine/
        compiled.py), the comparisons after it are machine integers and strings, not generic objects."""
        dumps_sorted, sha256 = _dumps_sorted, _sha256
        objs, verified = parse_batch(lines)
        branches = self.branches
        views = self.views
        suffixes = self._at_suffixes
        prefix = self._at_prefix
        last_at = self._last_at  # the last `at` proven valid
        last_turn = self._last_turn
        run = self.run
        k_at, k_branch, k_kind, k_lsn, k_run, k_v, k_turn = _K_AT, _K_BRANCH, _K_KIND, _K_LSN, _K_RUN, _K_V, _K_TURN
        n = self.line_no
        fast = 0
        i = -1
        for obj in objs:
            i += 1
            line = lines[i]
            n += 1
            self.line_no = n
            if type(obj) is not dict:  # None: not JSON
                self._feed_general(line)
                run = self.run
                continue
            record: dict[str, Any] = obj
            try:
                at, b, kind = record[k_at], record[k_branch], record[k_kind]
                ln, record_run, v = record[k_lsn], record[k_run], record[k_v]
                canonical = verified or dumps_sorted(record) == line
            except (KeyError, TypeError):
                self._feed_general(line)
                run = self.run
                continue
            lsn: object = ln
            if check_marks and (line.find(b".") >= 0 or line.find(b"+") >= 0 or line.find(b"e-") >= 0):
                canonical = False
            info = branches.get(b) if type(b) is int else None
            if not (
                canonical
                and record_run == run
                and info is not None  # branches are created >= 0
                and type(v) is int
                and 0 < v < 3
                and type(ln) is int
                and ln == info.next_lsn  # so ln >= 0
                and type(kind) is str
                and _known_kind(kind)
                and type(at) is str
            ):
                # Not one object (torn, not JSON), not canonical, a float maybe, another run, a field of
                # another type, out of sequence: not the common case.
                self._feed_general(line)
                run = self.run
                continue
            if at != last_at:  # a writer's records share their time with the previous one, often
                if not (at.startswith(prefix) and at[16:] in suffixes):
                    if not self._at_ok(at):
                        self._feed_general(line)
                        continue
                    prefix = self._at_prefix
                last_at = at
            record_digest = sha256(line).hexdigest()  # the raw bytes are canonical: theirs is the digest
            view = views[b]
            if not _chain_holds(record, v, info.last_digest) or v < view.schema:
                self._feed_general(line, record_digest)
                continue
            # Every run-level check passed: the turn rules.
            fast += 1
            turn = record.get(k_turn)
            if type(turn) is str:
                # A turn's records mostly follow each other. The same string object for all of them: its
                # hash is computed once, and the dicts keyed by turn find it by identity.
                if turn == last_turn:
                    turn = last_turn
                else:
                    last_turn = turn
            if info.undo is not None:
                info.undo.note(view, ln, True, turn)
            view.schema = v
            info.next_lsn = ln + 1
            info.last_digest = record_digest
            if not (type(turn) is str and turn and self._turn_rule(kind, record, v, b, ln, view, turn)):
                self._semantics(record, v, b, ln, view)  # a fork, a checkpoint, or a record that names no turn
            if lsn in info.points:  # the parsed int itself: compiled, `ln` would be boxed again first
                self._take_snapshot(b, ln)  # a point a later fork or checkpoint needs (rare)
        self.records += fast
        self._last_at = last_at
        self._last_turn = last_turn

    def _plan(self, raw: Any) -> tuple[str, ...] | None:
        """A well-formed plan (a non-empty list of distinct non-empty names) as the one tuple kept for it
        (turns usually share a few plans: memory grows with turns, not with their plans); else None."""
        if type(raw) is not list or not raw:
            return None
        for name in raw:
            if type(name) is not str or not name:
                return None
        if len(set(raw)) != len(raw):
            return None
        key = tuple(raw)
        return self._plans.setdefault(key, key)

    def _feed_general(self, line: bytes, canonical_digest: str | None = None) -> None:
        """One line, any line: parsed strictly unless it is known canonical (then its digest is given)."""
        if canonical_digest is not None or (_loads is not None and self._canonical(line)):
            obj = _loads(line) if _loads is not None else None
            assert isinstance(obj, dict)
            self.records += 1
            self._record(obj, None, "", canonical_digest or _sha256(line).hexdigest())
            return
        parsed = parse_strict(line)
        obj = parsed.obj
        if obj is None:
            # A torn line's branch and lsn are unknown (section 1): never repaired, never quoted.
            self._violate(
                parsed.error or Code.STORAGE_CORRUPTION, None, None, None, f"line {self.line_no}: {parsed.detail}"
            )
            return
        self.records += 1
        self._record(obj, parsed.error, parsed.detail, parsed.digest)

    @staticmethod
    def _canonical(line: bytes) -> bool:
        """orjson reads the line as one object whose canonical bytes are the line, and it holds no float."""
        assert _loads is not None
        try:
            obj = _loads(line)
            written = _dumps(obj, option=_SORT_KEYS)
        except _DecodeError:
            return False
        except TypeError:  # orjson reads 1,024 levels of nesting but writes 254: the strict reader decides
            return False
        return obj.__class__ is dict and written == line and not has_float(obj)

    def _envelope_problem(self, obj: dict[str, Any], error: str | None, detail: str) -> tuple[str, str] | None:
        """The first problem of a record's envelope (docs/engine.md, "check order"), or None."""
        n = self.line_no
        v = obj.get("v")
        if error is not None:
            return (Code.RECORD_INVALID, f"line {n}: {detail}")
        if not _is_int(v):
            return (Code.RECORD_INVALID, f"line {n}: missing or non-integer schema version v")
        if v not in (1, 2):
            return (Code.SCHEMA_UNSUPPORTED, f"line {n}: schema version {v} is not supported (1 or 2)")
        if type(obj.get("run")) is not str:
            return (Code.RECORD_INVALID, f"line {n}: missing or non-string run")
        branch, lsn = obj.get("branch"), obj.get("lsn")
        if not (_is_int(branch) and branch >= 0 and _is_int(lsn) and lsn >= 0):
            return (Code.RECORD_INVALID, f"line {n}: branch and lsn must be integers >= 0")
        if type(obj.get("kind")) is not str:
            return (Code.RECORD_INVALID, f"line {n}: missing or non-string kind")
        if not self._at_ok(obj.get("at")):
            return (Code.RECORD_INVALID, f"line {n}: at is not an RFC 3339 time")
        if self.run is None:
            self.run = obj["run"]
        elif obj["run"] != self.run:
            return (Code.RUN_MISMATCH, f"line {n}: the record names another run than the first record")
        if obj["kind"] not in KINDS:
            return (Code.KIND_UNKNOWN, f"line {n}: unknown record kind")
        return None

    def _record(self, obj: dict[str, Any], error: str | None, detail: str, record_digest: str | None) -> None:
        v = obj.get("v")
        branch = obj.get("branch")
        lsn = obj.get("lsn")
        problem = self._envelope_problem(obj, error, detail)
        envelope_ok = _is_int(branch) and branch >= 0 and _is_int(lsn) and lsn >= 0
        if problem is not None:
            self._violate(
                problem[0],
                branch if envelope_ok else None,
                lsn if envelope_ok else None,
                _turn_of(obj, error),
                problem[1],
            )
        if not envelope_ok:
            return
        assert _is_int(branch) and _is_int(lsn)
        b, ln = branch, lsn

        info = self.branches.get(b)
        if info is None:
            self._violate(
                Code.FORK_INVALID,
                b,
                ln,
                _turn_of(obj, error),
                f"line {self.line_no}: branch {b} was not created by a fork",
            )
            return
        # lsn continuity per branch: 0, 1, 2, ... in file order.
        first_at_lsn = True
        if ln == info.next_lsn:
            info.next_lsn = ln + 1
        else:
            self._lsn_gap(obj, info, b, ln, error)
            first_at_lsn = ln > info.next_lsn
            info.next_lsn = max(info.next_lsn, ln + 1)
            if not first_at_lsn:
                info.dirty_at = info.next_lsn
        if info.undo is not None:
            info.undo.note(self.views[b], ln, first_at_lsn, obj.get("turn"))
        if not _chain_holds(obj, v, info.last_digest):
            self._chain(obj, info, b, ln, error)
        info.last_digest = record_digest or _INVALID_DIGEST

        if problem is None:
            assert _is_int(v)
            view = self.views[b]
            if v != view.schema:
                if v < view.schema:
                    turn = obj.get("turn")
                    self._violate(
                        Code.SCHEMA_REGRESSION,
                        b,
                        ln,
                        turn if type(turn) is str else None,
                        f"line {self.line_no}: a v{v} record after a v{view.schema} record on this timeline",
                    )
                else:
                    view.schema = v
            self._semantics(obj, v, b, ln, view)
        if first_at_lsn and ln in info.points:
            self._take_snapshot(b, ln)

    def _lsn_gap(self, obj: dict[str, Any], info: _Branch, b: int, ln: int, error: str | None) -> None:
        self._violate(
            Code.LSN_GAP,
            b,
            ln,
            _turn_of(obj, error),
            f"line {self.line_no}: lsn {ln} on branch {b}, expected {info.next_lsn}",
        )

    def _chain(self, obj: dict[str, Any], info: _Branch, b: int, ln: int, error: str | None) -> None:
        if info.last_digest is None:
            why = "prev present on the first record of branch 0"
        elif "prev" not in obj:
            why = "prev missing"
        else:
            why = f"prev does not match the digest of the previous record of branch {b}"
        self._violate(Code.CHAIN_BROKEN, b, ln, _turn_of(obj, error), f"line {self.line_no}: {why}")

    def _invalid(self, b: int, ln: int, turn: str | None, what: str) -> None:
        self._violate(Code.RECORD_INVALID, b, ln, turn, f"line {self.line_no}: {what}")

    def _semantics(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View) -> None:
        """The rules of the record's kind, on the timeline of its branch. Every record that passed its
        run-level checks comes here, or (from the fast path, when it names a turn) straight to _turn_rule."""
        kind = obj["kind"]
        if kind == "fork":
            self._fork(obj, b, ln)
            return
        if kind == "checkpoint":
            self._checkpoint(obj, b, ln)
            return
        turn = obj.get(_K_TURN)
        if type(turn) is not str or not turn:
            self._invalid(b, ln, None, f"{kind} needs a non-empty string turn")
            return
        self._turn_rule(kind, obj, v, b, ln, view, turn)

    def _turn_rule(self, kind: str, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> bool:
        """The rules of a kind that names a turn, one method each (each rule is written once, in that method,
        its commonest step first), the commonest kind first; False for a kind that names no turn."""
        if kind == "phase_committed":
            self._phase(obj, v, b, ln, view, turn)
        elif kind == "intent_dispatched":
            self._dispatched(obj, v, b, ln, view, turn)
        elif kind == "effect_observed":
            self._observed(obj, v, b, ln, view, turn)
        elif kind == "turn_planned":
            self._planned(obj, v, b, ln, view, turn)
        elif kind == "turn_terminal":
            self._terminal(obj, v, b, ln, view, turn)
        else:
            return False
        return True

    def _after_terminal(self, view: View, turn: str, b: int, ln: int) -> None:
        """A record names the turn after its terminal record (the caller has seen `terminal` set)."""
        self._turn_violation(
            view,
            turn,
            Code.STATUS_PHASE_MISMATCH,
            b,
            ln,
            f"line {self.line_no}: a record names the turn after its terminal record",
        )

    def _planned(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        plan_field = _K_STAGES if v == 1 else _K_PHASES
        raw = obj.get(plan_field, _ABSENT)
        phases = _DEFAULT_PHASES if raw is _ABSENT else self._plan(raw)
        if phases is None:
            self._invalid(b, ln, turn, f"{plan_field} must be a non-empty list of distinct phase names")
            return
        lineage_raw = obj.get(_K_LINEAGE)
        if lineage_raw is not None and type(lineage_raw) is not str:
            self._invalid(b, ln, turn, "lineage must be a string")
            return
        lineage = self._names.setdefault(lineage_raw, lineage_raw) if lineage_raw else None  # turns of a job share it
        n = self.line_no
        self.turns_first.setdefault(turn, (n, lineage, b))  # one lookup: a turn is planned once, mostly
        state = TurnState(lineage, phases, b, view.gen)
        existing = view.turns.setdefault(turn, state)
        if existing is state:
            if view.unplanned:
                state.violations = view.take_unplanned(turn)
            if lineage is None:
                self._turn_violation(view, turn, Code.LINEAGE_MISSING, b, ln, f"line {n}: the turn has no lineage")
            return
        if existing.terminal is not None:
            self._after_terminal(view, turn, b, ln)
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

    def _phase(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        phase = obj.get(_K_PHASE)
        state = view.turns.get(turn)
        if state is not None and state.terminal is None:
            done = state.done
            if type(phase) is str and done < len(state.phases) and state.phases[done] == phase:  # the next phase
                if state.gen != view.gen:
                    state = view.writable(turn)
                state.done = done + 1
                return
        if not _nonempty_str(phase):
            self._invalid(b, ln, turn, "phase_committed needs a non-empty string phase")
            return
        n = self.line_no
        if state is None:
            self._unknown_turn(view, turn, b, ln, f"line {n}: a phase of a turn not planned on this timeline")
            return
        if state.terminal is not None:
            self._after_terminal(view, turn, b, ln)
            return
        done = state.done
        expected = state.phases[done] if done < len(state.phases) else None
        if phase not in state.phases:
            why = "a phase not in the plan"
        elif phase in state.phases[:done]:
            why = "a phase committed twice"
        else:
            why = f"out of order: {expected} is not committed yet"
        self._turn_violation(view, turn, Code.PHASE_PREFIX_VIOLATION, b, ln, f"line {n}: {why}")

    def _dispatched(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        intent = obj.get(_K_INTENT)
        if type(intent) is not str or not intent:
            self._invalid(b, ln, turn, "intent_dispatched needs a non-empty string intent")
            return
        key = obj.get(_K_IDEMPOTENCY_KEY)
        if key is not None and type(key) is not str:
            self._invalid(b, ln, turn, "idempotency_key must be a string")
            return
        if type(obj.get(_K_ARGS_DIGEST, "")) is not str:
            self._invalid(b, ln, turn, "args_digest must be a string")
            return
        if v == 1:
            unsafe = obj.get("unsafe")
            if type(unsafe) is not bool:
                self._invalid(b, ln, turn, "a v1 intent_dispatched needs unsafe: true|false")
                return
            effect_class = "unsafe" if unsafe else ("idempotent" if key else "safe")
        else:
            raw_class = obj.get(_K_EFFECT_CLASS)
            if type(raw_class) is not str or raw_class not in _CLASSES:
                self._invalid(b, ln, turn, "effect_class must be safe, idempotent or unsafe")
                return
            effect_class = _CLASSES[raw_class]
        key = key or None
        intent = self._names.setdefault(intent, intent)  # ids repeat across turns: keep one of each
        n = self.line_no
        # The world ledger: every dispatch is a fact, whatever the branch.
        wkey = (turn, intent)
        world = self.world.get(wkey)
        if world is None:
            world = self.world[wkey] = _World(turn, intent, n)
        redispatch = False
        if world.count == 0:
            world.first_class, world.first_key = effect_class, key
            world.first_branch, world.first_lsn = b, ln
        else:
            redispatch = self._retry(world, effect_class, key, b, ln)
        world.count += 1
        world.branch, world.lsn, world.effect_class, world.key, world.outcome = b, ln, effect_class, key, None
        self._timeline_dispatch(view, turn, intent, effect_class, key, b, ln)
        if redispatch:
            self._world_violation(
                world,
                Code.UNSAFE_REDISPATCH,
                b,
                ln,
                f"line {n}: an unsafe intent dispatched again while its previous dispatch may have happened",
            )

    def _retry(self, world: _World, effect_class: str, key: str | None, b: int, ln: int) -> bool:
        """A dispatch of an intent dispatched before (anywhere): whether it is an unsafe redispatch."""
        if effect_class != world.first_class or key != world.first_key:
            self._world_violation(
                world,
                Code.INTENT_CONFLICT,
                b,
                ln,
                f"line {self.line_no}: a retry changed the intent's effect class or key",
            )
        # The previous dispatch's readbacks are final now (a readback is about the latest dispatch).
        previous = world.outcome
        if world.bound is None and previous not in _DEFINITIVE:
            world.bound = world.count - 1
        redispatch = False
        if effect_class == "unsafe" and previous != "failed":
            # Legal only when evidence says the previous dispatch did not happen, and only when it is
            # the dispatch the evidence is about (so the evidence allows exactly one new dispatch).
            found = (
                self._evidence_at(world.turn, world.intent, world.count - 1, world.bound)
                if self.evidence and previous not in _DEFINITIVE
                else None
            )
            redispatch = found != _NOT_HAPPENED
        if b != world.first_branch and b not in world.more_firsts[::2]:
            world.more_firsts += (b, ln)
        return redispatch

    def _timeline_dispatch(
        self, view: View, turn: str, intent: str, effect_class: str, key: str | None, b: int, ln: int
    ) -> None:
        n = self.line_no
        state = view.turns.get(turn)
        if state is None:
            self._unknown_turn(view, turn, b, ln, f"line {n}: an intent of a turn not planned on this timeline")
            return
        if state.terminal is not None:
            self._after_terminal(view, turn, b, ln)
            return
        if state.gen != view.gen:
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
        intents = state.intents
        if intents is None:
            state.intents = {intent: (effect_class, key, 1, None)}
            return
        entry = intents.get(intent)
        if entry is None:
            intents[intent] = (effect_class, key, 1, None)
        else:
            intents[intent] = (entry[0], entry[1], entry[2] + 1, None)

    def _observed(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        intent, outcome = obj.get(_K_INTENT), obj.get(_K_OUTCOME)
        if type(intent) is not str or not intent:
            self._invalid(b, ln, turn, "effect_observed needs a non-empty string intent")
            return
        if type(outcome) is not str or outcome not in _OUTCOMES:
            self._invalid(b, ln, turn, "outcome must be succeeded, failed or unknown")
            return
        outcome = _OUTCOMES[outcome]
        n = self.line_no
        world = self.world.get((turn, intent))
        if world is None or not world.count:
            if world is None:
                world = self.world[(turn, intent)] = _World(turn, intent, n)
            self._world_violation(
                world, Code.INTENT_UNKNOWN, b, ln, f"line {n}: a readback of an intent never dispatched"
            )
        else:
            # A readback is of the intent's latest dispatch before it, wherever it was recorded.
            world.outcome = merge_outcome(world.outcome, outcome)
        state = view.turns.get(turn)
        if state is None:
            self._unknown_turn(view, turn, b, ln, f"line {n}: a readback for a turn not planned on this timeline")
            return
        if state.terminal is not None:
            self._after_terminal(view, turn, b, ln)
            return
        entry: IntentEntry | None = state.intents.get(intent) if state.intents is not None else None
        if entry is not None:
            if state.gen != view.gen:
                state = view.writable(turn)
            intents: Any = state.intents
            intents[intent] = (entry[0], entry[1], entry[2], merge_outcome(entry[3], outcome))

    def _terminal(self, obj: dict[str, Any], v: int, b: int, ln: int, view: View, turn: str) -> None:
        status = obj.get(_K_STATUS)
        if type(status) is not str or status not in _STATUSES:
            self._invalid(b, ln, turn, "status must be completed, failed or cancelled")
            return
        status = _STATUSES[status]
        n = self.line_no
        state = view.turns.get(turn)
        if state is None:
            self._unknown_turn(view, turn, b, ln, f"line {n}: a terminal record for a turn not planned")
            return
        if state.terminal is not None:
            self._after_terminal(view, turn, b, ln)
            return
        if state.gen != view.gen:
            state = view.writable(turn)
        state.terminal = status
        if status == "completed" and state.done != len(state.phases):
            self._turn_violation(
                view,
                turn,
                Code.STATUS_PHASE_MISMATCH,
                b,
                ln,
                f"line {n}: completed with {len(state.phases) - state.done} phase(s) uncommitted",
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
        info = self.branches[new_branch] = _Branch(
            new_branch, b, from_lsn, ln, digest(obj), self._point_lsns.setdefault(new_branch, set())
        )
        old = self.branches[b]
        self.forked_turns = turns_since(old.undo, from_lsn, self.forked_turns)
        if self.rewind_window:
            # Only the live branch keeps an undo log (rewind.py): forks are written on it.
            info.undo = UndoLog(self.rewind_window, -1)
            old.undo = None
        old.discarded_from = from_lsn
        base.branch_off()  # the new branch copies each shared turn state before its first write
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
                ok = snap.digest(self.digest_cache) == state_digest
                if ok and "state" in obj:
                    ok = digest_no_float(obj["state"]) == state_digest  # a valid record holds no float
        self.checkpoints.append({"branch": b, "lsn": ln, "covers_lsn": covers, "verified": ok})
        if not ok:
            self._violate(
                Code.CHECKPOINT_MISMATCH,
                b,
                ln,
                None,
                f"line {n}: the checkpoint's state digest does not match the re-fold through lsn {covers}",
            )

    # -- deciding ----------------------------------------------------------------------------------------
    def _evidence_at(self, turn: str, intent: str, index: int, bound: int | None) -> str | None:
        """The operator's finding about the intent's dispatch ``index`` (0-based), if any.

        Evidence given with its dispatch number (the service records how many dispatches the intent had
        when the operator looked) is about exactly that dispatch. Bare evidence (the command line's form)
        is about the first dispatch without a definitive readback (``bound``). Either way it allows one new
        dispatch at most, and never outlives the dispatch it was about: a later send is a new fact."""
        found = self.evidence.get((turn, intent))
        if found is None:
            found = self.evidence.get(intent)
        if found is None:
            return None
        if isinstance(found, dict):
            return found.get(index)
        return found if bound == index else None

    def outlook(self, expect: Mapping[int, int]) -> tuple[Violation | None, int, dict[int, float]]:
        """What every turn's decision reads beside its own fold and intents: the run's reason under
        ``expect``, the live branch, and how far the live timeline runs on each branch."""
        violations = [*self.violations, *self._offset_violations(expect)]
        violations.sort(key=_line_of)
        return self._run_level(violations), self.live, self._live_cut()

    def finish(self, expect: Mapping[int, int], only: set[str] | None = None) -> Assessment:
        """The assessment: the offsets checked, the run's reason found, each intent resolved and each turn
        decided (section 6), in that order. ``only``: the decisions of those turns alone (in the same order),
        the rest of the assessment whole."""
        # Not kept: finish changes nothing, so the fold can go on (a fold snapshot is taken before or after).
        violations = [*self.violations, *self._offset_violations(expect)]
        violations.sort(key=_line_of)  # stable: file order, ties in order found
        run_level = self._run_level(violations)
        runs, blocking, undetermined = self._intent_views(only)
        live_turns = self.views[self.live].turns
        # turns_first is in order of first planning (insertion order is file order, and so is each line).
        firsts = self.turns_first
        if only is not None:
            firsts = {turn: firsts[turn] for turn in sorted(only & firsts.keys(), key=firsts.__getitem__)}
        intents_of = _aligned(firsts, runs)
        # The live view holds its turns in order of planning on its timeline, mostly the order of firsts:
        # each turn is found at the next place of the live view's turns (a comparison), not by a lookup in
        # a table of every turn, which misses the processor's cache; a turn that is not there is looked up.
        live_keys: list[str] = list(live_turns) if only is None else []
        live_states: list[TurnState] = list(live_turns.values()) if only is None else []
        held = len(live_keys)
        j = 0
        decisions: list[TurnDecision] = []
        i = -1
        for turn, first in firsts.items():
            i += 1
            if j < held and live_keys[j] == turn:
                state: TurnState | None = live_states[j]
                j += 1
            else:
                state = live_turns.get(turn)
            decisions.append(
                self._decide(
                    turn,
                    first,
                    state,
                    intents_of[i],
                    blocking.get(turn),
                    run_level,
                    turn in undetermined,
                )
            )
        return Assessment(
            self.run,
            self.live,
            self.records,
            tuple(violations),
            tuple(decisions),
            self._branch_views(),
            tuple(self.checkpoints),
        )

    def _offset_violations(self, expect: Mapping[int, int]) -> list[Violation]:
        """`offset_mismatch`: the expected high-waters the journal does not hold, after its last line."""
        end_line = self.line_no + 1
        held = {number: info.next_lsn - 1 for number, info in self.branches.items()}
        return [
            Violation(
                Code.OFFSET_MISMATCH,
                mismatch.branch,
                mismatch.stored if mismatch.stored >= 0 else None,
                None,
                mismatch.detail,
                end_line,
            )
            for mismatch in offset_mismatches(held, expect)
        ]

    @staticmethod
    def _run_level(violations: list[Violation]) -> Violation | None:
        """The run's reason (rule 1): its first run-level violation in file order, an offset mismatch only
        when there is no other (the violations are sorted)."""
        first = next((x for x in violations if x.code in RUN_LEVEL and x.code != Code.OFFSET_MISMATCH), None)
        if first is None:
            first = next((x for x in violations if x.code == Code.OFFSET_MISMATCH), None)
        return first

    def _intent_views(
        self, only: set[str] | None = None
    ) -> tuple[list[tuple[str, tuple[IntentView, ...]]], dict[str, list[tuple[int, str]]], set[str]]:
        """The intents (of the turns ``only`` names, if given), in order of first dispatch (the ledger's
        insertion order is file order), each resolved, as runs of consecutive intents of one turn (turn,
        its intents in that run); the world-ledger violations of each turn; and the turns with a live intent
        that is indeterminate (rule 4)."""
        entries: Iterable[_World] = self.world.values()
        if only is not None:
            world_of = self._world_of
            if self._world_indexed < len(self.world):
                for w in islice(self.world.values(), self._world_indexed, None):
                    listed = world_of.get(w.turn)
                    if listed is None:
                        world_of[w.turn] = [w]
                    else:
                        listed.append(w)
                self._world_indexed = len(self.world)
            entries = [w for turn in only if turn in world_of for w in world_of[turn]]
        runs: list[tuple[str, tuple[IntentView, ...]]] = []
        run_turn = ""  # the turn of the last run (a turn id is never empty)
        blocking: dict[str, list[tuple[int, str]]] = {}
        undetermined: set[str] = set()
        cut = self._live_cut()
        for w in entries:
            turn = w.turn
            if w.violations:
                blocking.setdefault(turn, []).extend(w.violations)
            if not w.count:
                continue
            live = w.first_lsn <= cut.get(w.first_branch, -1)
            if not live and w.more_firsts:
                more = w.more_firsts
                live = any(more[i + 1] <= cut.get(more[i], -1) for i in range(0, len(more), 2))
            resolution = self._resolve(w)
            if live and resolution is _INDETERMINATE:
                undetermined.add(turn)
            iv = IntentView(w.intent, w.effect_class, w.branch, live, resolution, w.key, w.count, w.outcome)
            if turn == run_turn:
                runs[-1] = (turn, (*runs[-1][1], iv))
            else:
                runs.append((turn, (iv,)))
                run_turn = turn
        return runs, blocking, undetermined

    def _branch_views(self) -> tuple[BranchView, ...]:
        return tuple(
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

    def _live_cut(self) -> dict[int, float]:
        """Branch -> highest own lsn on the live timeline."""
        cut: dict[int, float] = {self.live: float("inf")}
        info = self.branches[self.live]
        while info.parent is not None:
            assert info.from_lsn is not None
            cut[info.parent] = info.from_lsn
            info = self.branches[info.parent]
        return cut

    def _resolve(self, w: _World) -> Resolution:
        """What recovery may do about an intent's latest dispatch (section 6, the resolution ladder)."""
        outcome = w.outcome
        if outcome == "succeeded" or outcome == "failed":
            return _SETTLED
        if self.evidence:
            found = self._evidence_at(w.turn, w.intent, w.count - 1, w.evidence_bound())
            if found == _HAPPENED:
                return _SETTLED
            if found == _NOT_HAPPENED:
                return _REPLAY
        effect_class = w.effect_class
        if effect_class == "safe":
            return _REPLAY
        if effect_class == "idempotent":
            return _REISSUE
        return _INDETERMINATE

    def _decide(
        self,
        turn: str,
        first: tuple[int, str | None, int],
        state: TurnState | None,
        intents: tuple[IntentView, ...],
        world_violations: list[tuple[int, str]] | None,
        run_level: Violation | None,
        indeterminate: bool,
    ) -> TurnDecision:
        """The first rule of section 6 that applies to the turn (`state`: its fold on the live timeline;
        `indeterminate`: it has a live intent that is indeterminate)."""
        if state is None:
            return self._decide_discarded(turn, first, intents, run_level)
        decision = _RESUME
        resume_from: str | None = None
        reason: str | None = None
        line: int | None = None
        if run_level is not None:
            decision, reason, line = _BLOCKED, run_level.code, run_level.line
        elif state.violations or world_violations:
            turn_level = [(at, code) for code, _b, _l, at in state.violations]
            turn_level.extend(world_violations or ())
            line, reason = min(turn_level, key=_line_of_pair)
            decision = _BLOCKED
        elif indeterminate:
            decision, reason = _BLOCKED, EFFECT_INDETERMINATE
        elif state.terminal is not None:
            decision = _COMPLETE
        elif state.done == len(state.phases):
            decision = _FINALIZE
        else:
            resume_from = state.phases[state.done]
        return TurnDecision(
            turn,
            state.lineage,
            state.plan_branch,
            decision,
            resume_from,
            reason,
            state.committed,
            intents,
            state.phases,
            state.terminal,
            line,
        )

    def _decide_discarded(
        self,
        turn: str,
        first: tuple[int, str | None, int],
        intents: tuple[IntentView, ...],
        run_level: Violation | None,
    ) -> TurnDecision:
        """A turn planned only on a discarded suffix: evidence, never resumed (rule 2 unless the run is
        blocked). Its lineage and branch are those of its first planning, its phases those of that timeline."""
        _, first_lineage, first_branch = first
        home = self.views[first_branch].turns.get(turn)
        completed = home.committed if home else ()
        phases = home.phases if home else ()
        if run_level is not None:
            return TurnDecision(
                turn,
                first_lineage,
                first_branch,
                _BLOCKED,
                None,
                run_level.code,
                completed,
                intents,
                phases,
                None,
                run_level.line,
            )
        return TurnDecision(
            turn,
            first_lineage,
            first_branch,
            _DISCARDED,
            None,
            None,
            completed,
            intents,
            phases,
            home.terminal if home else None,
            None,
        )


def _aligned(firsts: dict[str, Any], runs: list[tuple[str, tuple[IntentView, ...]]]) -> list[tuple[IntentView, ...]]:
    """Each turn's intents, in the order of ``firsts`` (its turns), from ``runs`` (_intent_views). A turn's
    dispatches mostly follow each other, in the order the turns were planned: then each run is the next
    turn's that has intents, found by comparing ids, without a table of every turn (a lookup in one misses
    the processor's cache). When a run is left over, a turn's intents are in several runs or not in that
    order: they are gathered by turn. (When every run is taken, each was taken by the one turn of its id,
    in order, so no turn has another run.)"""
    out: list[tuple[IntentView, ...]] = []
    k = 0
    held = len(runs)
    for turn in firsts:
        if k < held and runs[k][0] == turn:
            out.append(runs[k][1])
            k += 1
        else:
            out.append(())
    if k == held:
        return out
    intents_of: dict[str, tuple[IntentView, ...]] = {}
    for turn, views in runs:
        mine = intents_of.get(turn)
        intents_of[turn] = views if mine is None else (*mine, *views)
    return [intents_of.get(turn, ()) for turn in firsts]


_line_of = attrgetter("line")
_line_of_pair = itemgetter(0)


def _finding(value: Any) -> str:
    return Evidence(value.value if isinstance(value, Evidence) else value).value


def normalise_evidence(evidence: EvidenceMap | None) -> dict[Any, Any]:
    """Keys stay as given; values become a finding (bare: binds to the first unsettled dispatch) or a
    {dispatch index: finding} map, from ``(finding, dispatch_number)`` pairs (1-based) or lists of them."""
    out: dict[Any, Any] = {}
    for key, value in (evidence or {}).items():
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):
            value = [value]
        if isinstance(value, list):
            exact: dict[int, str] = {}
            for finding, number in value:
                if not isinstance(number, int) or number < 1:
                    raise ValueError(f"evidence for {key!r}: dispatch numbers start at 1")
                exact[number - 1] = _finding(finding)
            out[key] = exact
        else:
            out[key] = _finding(value)
    return out


@contextmanager
def cycle_collection_paused(*, settle: bool = False) -> Iterator[None]:
    """The cyclic garbage collector paused while an assessment runs, and restored (if it was on) after.

    The fold allocates millions of small objects that never form cycles, and reference counting frees
    them as usual; the collector would walk all of them again and again to find nothing, a cost that
    grows with the journal (docs/perf/2026-12-02-engine-predicates.md has the measurement).

    ``settle`` (a whole journal's assessment): what the pause leaves alive is moved to the oldest
    generation, below. Not for a batch folded into a kept fold (engine/incremental.py): its result is a
    batch's turns, and asking whether anything is frozen walks every frozen object, the kept fold's
    millions among them, on every batch (benchmarks/bench_growth.py)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if settle and gc.get_freeze_count() == 0:
                # What the pause leaves alive is mostly the assessment (100,000s of objects, no garbage):
                # it goes straight to the oldest generation, by two list splices, instead of being walked
                # by the next young collection (46 ms for 100,000 turns). The caller's young objects go
                # with it (a few thousand at most: the young generations are small); a cycle among them is
                # freed by the next full collection. Not when something is frozen (engine/warm.py): unfreezing
                # would hand it back to the collector.
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class OffsetMismatch(NamedTuple):
    """A branch whose held high-water lsn differs from the one the writer expected (contract section 6)."""

    branch: int
    expected: int
    stored: int

    @property
    def detail(self) -> str:
        return f"expected high-water lsn {self.expected} on branch {self.branch}, the journal holds {self.stored}"


def offset_mismatches(held: Mapping[int, int], expect: Mapping[int, int]) -> list[OffsetMismatch]:
    """The expected high-waters (branch -> lsn, -1 for none) that ``held`` (branch -> the highest lsn held
    in order from 0; a branch absent holds none) does not match, by branch. The one comparison behind
    ``assess(expect=...)``, ingest's ``LoopX-Expect`` and the gate's ``?expect``: never reconciled by
    trusting either side."""
    return [
        OffsetMismatch(branch, expected, held.get(branch, -1))
        for branch, expected in sorted(expect.items())
        if held.get(branch, -1) != expected
    ]


def assess(
    source: Source,
    *,
    expect: Mapping[int, int] | None = None,
    evidence: EvidenceMap | None = None,
) -> Assessment:
    """Assess a journal. ``source``: a path, a sequence of lines (bytes, no newline) in file order, or a
    callable returning a fresh iterable of lines. ``expect``: branch -> expected high-water lsn.
    ``evidence``: ``(turn, intent)`` or bare intent id -> ``Evidence``. Raises JournalUnreadable."""
    with cycle_collection_paused(settle=True):
        assessor = fold_lines(source, lambda points: Assessor(points, normalise_evidence(evidence)))
        result = assessor.finish(dict(expect or {}))
        # The fold is freed while the collector is still paused: once it is back on, its first collection
        # would walk every object of the fold (millions) before reference counting freed them anyway.
        del assessor
    return result


def fold_lines(source: Source, start: Callable[[Counter[tuple[int, int]]], Assessor]) -> Assessor:
    """Fold a journal, or the lines after a resumed fold's last line, into the Assessor that ``start`` gives
    for their pre-scan's points; the caller finishes it. Raises JournalUnreadable."""
    reader = _Reader(source)
    assessor = start(reader.prescan())
    for block, lines in reader.chunks():
        assessor.feed_batch(lines, block)
    return assessor


assess_path = assess


def fold_state(source: Source, branch: int, through_lsn: int) -> dict[str, Any]:
    """The canonical fold of ``branch``'s timeline through its own ``through_lsn`` (-1: only what it
    inherited). A runtime writes ``digest(fold_state(...))`` as a checkpoint's ``state_digest``."""
    reader = _Reader(source)
    points = reader.prescan()
    points[(branch, through_lsn)] += 1
    assessor = Assessor(points)
    snap = assessor.snapshots.get((branch, through_lsn))  # (0, -1): the empty timeline, before any line
    if snap is not None:
        return snap.to_canonical()
    for batch in reader.batches():
        for line in batch:
            assessor.feed(line)
            snap = assessor.snapshots.get((branch, through_lsn))
            if snap is not None:
                return snap.to_canonical()
    raise ValueError(f"branch {branch} has no lsn {through_lsn} in this journal")


def rebuild_state(state: Mapping[str, Any], records_above: Iterable[bytes]) -> dict[str, Any]:
    """Rebuild a timeline's fold from a checkpoint's canonical ``state`` and then fold the records above
    it (the same branch's records after ``covers_lsn``, in order). Equals folding from lsn 0."""
    assessor = Assessor(Counter())
    view = View.from_canonical(dict(state))
    for line in records_above:
        assessor.line_no += 1
        parsed = parse_strict(line)
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
