"""The local turn journal: the contract's v2 records, durable before a write returns.

One file, one run, one JSON object per line in canonical bytes. Every record carries the contract's
envelope (``v`` 2, ``run``, ``branch``, ``lsn`` counting per branch from 0, ``kind``, ``at``) and ``prev``,
the digest of the previous record of its branch (for lsn 0 of a forked branch, the digest of its ``fork``
record; none for lsn 0 of branch 0). A write is appended, flushed and fsynced before the method returns:
what a caller was told is written survives a crash of the process or the machine.

Reopening a file continues it: the chain, the lsns and the live branch are read back from the file and
checked. A line that is not a complete record (a write cut short by a crash, a damaged file) raises
:class:`~loopx_client.errors.JournalCorrupt` and the file is left exactly as it is: a torn tail is never
silently dropped. ``loopx_client.repair.drop_torn_tail`` drops one, audited, when a person says so.

A record longer than the server's line limit is refused before it is written
(:class:`~loopx_client.errors.RecordTooLarge`): the server would refuse it on every ship.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from .canonical import RecordValueError, canonical_bytes, check_value, digest, parse_record
from .errors import (
    EffectFailed,
    JournalClosed,
    JournalCorrupt,
    JournalError,
    JournalMismatch,
    RecordRefused,
    RecordTooLarge,
    UnsafeRedispatch,
    WriteAheadRequired,
)
from .limits import DEFAULT_LIMITS, Limits

try:  # POSIX: one writer per journal file
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

EffectClass = Literal["safe", "idempotent", "unsafe"]
Outcome = Literal["succeeded", "failed", "unknown"]
Status = Literal["completed", "failed", "cancelled"]

DEFAULT_PHASES = ("plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend")
EFFECT_CLASSES = ("safe", "idempotent", "unsafe")
OUTCOMES = ("succeeded", "failed", "unknown")
STATUSES = ("completed", "failed", "cancelled")
# Fields of the envelope, written by the journal itself: a caller's extra fields may not name them.
_ENVELOPE = frozenset({"v", "run", "branch", "lsn", "kind", "at", "prev"})


def utc_now() -> str:
    """RFC 3339 in UTC with microseconds (informational only: the contract never orders by it)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Entry:
    """One record of the journal as written: its place and its exact line (without the newline)."""

    branch: int
    lsn: int
    kind: str
    turn: str | None
    line: bytes


@dataclass
class _Intent:
    effect_class: str
    key: str | None
    outcome: str | None = None  # the latest dispatch's readback; None: none yet


@dataclass
class Effect:
    """The intent an ``effect`` block runs. The block may say how it ended before it exits (the readback
    written after it): ``succeeded()`` (the default when the block returns), ``failed()`` (the effect did
    not happen: a retry is legal), or ``unknown()`` (it may or may not have happened)."""

    turn: str
    intent: str
    effect_class: str
    idempotency_key: str | None
    dispatch: dict[str, Any]
    outcome: str | None = None
    readback: dict[str, Any] | None = field(default=None)

    def succeeded(self) -> None:
        self.outcome = "succeeded"

    def failed(self) -> None:
        self.outcome = "failed"

    def unknown(self) -> None:
        self.outcome = "unknown"


def _nonempty_str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordRefused(f"{name} must be a non-empty string")
    return value


class Journal:
    """A durable local journal for one run (``run``), at ``path`` (created when missing).

    Methods named after the record kinds append one record each and return it as written: ``plan``,
    ``commit``, ``dispatch``, ``observe``, ``terminal``, ``fork``, ``checkpoint``. ``effect`` wraps a side
    effect between its dispatch and its readback. ``close`` (or the ``with`` block) ends the writer.
    One process writes a journal at a time (a second one gets JournalError while the first holds it).
    ``limits``: the server's (``Gate.limits()``); without, the server's documented defaults. A turn
    session (``Gate.turn``) sets the gate's.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run: str,
        clock: Callable[[], str] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.path = Path(path)
        self.run = _nonempty_str(run, "run")
        self.limits = limits or DEFAULT_LIMITS
        self._clock = clock or utc_now
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._next_lsn: dict[int, int] = {0: 0}
        self._last_digest: dict[int, str | None] = {0: None}
        self._branch = 0
        self._highest = 0
        self._planned: dict[str, str] = {}  # turn -> lineage
        self._intents: dict[tuple[str, str], _Intent] = {}
        self._needs_newline = False
        self._broken: str | None = None
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise JournalError(f"{self.path}: another writer has this journal open") from None
            if created:
                fsync_dir(self.path.parent)
            self._load(_read_all(fd))
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    # -- reading back ------------------------------------------------------------------------------------
    def _load(self, data: bytes) -> None:
        if not data:
            return
        offset = 0
        parts = data.split(b"\n")
        last_complete = data.endswith(b"\n")
        if last_complete:
            parts.pop()  # the final newline ends the last line
        for number, raw in enumerate(parts, start=1):
            is_last = number == len(parts)
            record = parse_record(raw) if raw.strip() else None
            if record is None:
                reason = "an empty line" if not raw.strip() else "not one complete JSON record"
                raise JournalCorrupt(
                    str(self.path), number, offset, reason, torn_tail=is_last and not last_complete
                )
            self._replay(record, raw, number)
            offset += len(raw) + 1
        # A complete last record without its newline counts as complete; the next write ends its line first.
        self._needs_newline = not last_complete

    def _replay(self, record: dict[str, Any], raw: bytes, number: int) -> None:
        where = f"{self.path}: line {number}"
        if record.get("v") != 2:
            raise JournalMismatch(f"{where}: v{record.get('v')!r} records; this client continues v2 journals only")
        if record.get("run") != self.run:
            raise JournalMismatch(f"{where}: a record of another run than {self.run!r}")
        branch, lsn, kind = record.get("branch"), record.get("lsn"), record.get("kind")
        if type(branch) is not int or type(lsn) is not int or not isinstance(kind, str):
            raise JournalMismatch(f"{where}: a record without an integer branch and lsn and a kind")
        if branch not in self._next_lsn:
            raise JournalMismatch(f"{where}: a record on branch {branch}, which no fork created")
        if lsn != self._next_lsn[branch]:
            raise JournalMismatch(f"{where}: lsn {lsn} on branch {branch}, expected {self._next_lsn[branch]}")
        if record.get("prev") != self._last_digest[branch]:
            raise JournalMismatch(f"{where}: `prev` does not chain to the previous record of branch {branch}")
        self._account(record)
        self._push(record, raw)

    def _push(self, record: dict[str, Any], line: bytes) -> None:
        branch, lsn = record["branch"], record["lsn"]
        self._next_lsn[branch] = lsn + 1
        self._last_digest[branch] = digest(record)
        turn = record.get("turn")
        self._entries.append(Entry(branch, lsn, record["kind"], turn if isinstance(turn, str) else None, line))
        if record["kind"] == "fork":
            new = record["new_branch"]
            self._highest = new
            self._branch = new
            self._next_lsn[new] = 0
            self._last_digest[new] = digest(record)

    def _account(self, record: dict[str, Any]) -> None:
        """What later writes are checked against: planned turns, each intent's latest dispatch and readback."""
        kind = record["kind"]
        turn, intent = record.get("turn"), record.get("intent")
        if kind == "turn_planned" and isinstance(turn, str):
            self._planned.setdefault(turn, str(record.get("lineage")))
        elif kind == "intent_dispatched" and isinstance(turn, str) and isinstance(intent, str):
            self._intents[(turn, intent)] = _Intent(str(record.get("effect_class")), record.get("idempotency_key"))
        elif kind == "effect_observed" and isinstance(turn, str) and isinstance(intent, str):
            known = self._intents.get((turn, intent))
            if known is not None and known.outcome in (None, "unknown"):
                known.outcome = record.get("outcome")  # a later `unknown` never downgrades a definitive one
        elif kind == "fork":
            new = record.get("new_branch")
            if type(new) is not int or new != self._highest + 1 or record.get("branch") != self._branch:
                raise JournalMismatch(f"{self.path}: a fork that does not create the next branch from the live one")

    # -- state -----------------------------------------------------------------------------------------
    @property
    def branch(self) -> int:
        """The live branch (the highest numbered)."""
        return self._branch

    @property
    def entries(self) -> list[Entry]:
        """Every record written, in file order."""
        with self._lock:
            return list(self._entries)

    @property
    def lines(self) -> list[bytes]:
        return [e.line for e in self.entries]

    def high_water(self) -> dict[int, int]:
        """branch -> its last lsn in this journal (-1: none yet): the ``expect`` of the gate's decision."""
        with self._lock:
            return {branch: lsn - 1 for branch, lsn in sorted(self._next_lsn.items())}

    def planned(self) -> dict[str, str]:
        """turn -> lineage, for every turn planned in this journal, in order of planning."""
        with self._lock:
            return dict(self._planned)

    def readback(self, turn: str, intent: str) -> str | None:
        """The latest dispatch's readback of the intent (None: not dispatched, or no readback yet)."""
        with self._lock:
            known = self._intents.get((turn, intent))
            return None if known is None else known.outcome

    def dispatched(self, turn: str, intent: str) -> bool:
        with self._lock:
            return (turn, intent) in self._intents

    # -- writing ---------------------------------------------------------------------------------------
    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one record of ``kind`` on the live branch, durably; returns it as written."""
        _nonempty_str(kind, "kind")
        clash = _ENVELOPE & fields.keys()
        if clash:
            raise RecordRefused(f"the journal writes the envelope itself: {', '.join(sorted(clash))}")
        with self._lock:
            self._writable()
            branch = self._branch
            record: dict[str, Any] = {
                "v": 2,
                "run": self.run,
                "branch": branch,
                "lsn": self._next_lsn[branch],
                "kind": kind,
                "at": self._clock(),
            }
            if self._last_digest[branch] is not None:
                record["prev"] = self._last_digest[branch]
            record.update(fields)
            try:
                check_value(record)
            except RecordValueError as exc:
                raise RecordRefused(str(exc)) from None
            self._check(record)
            line = canonical_bytes(record)
            if len(line) > self.limits.max_line_bytes:
                raise RecordTooLarge(len(line), self.limits.max_line_bytes)
            self._write((b"\n" if self._needs_newline else b"") + line + b"\n")
            self._needs_newline = False
            self._account(record)
            self._push(record, line)
            return dict(record)

    def _writable(self) -> None:
        if self._broken is not None:
            raise JournalClosed(f"{self.path}: an earlier write failed ({self._broken}); reopen the journal")
        if self._fd is None:
            raise JournalClosed(f"{self.path}: the journal is closed")

    def _check(self, record: dict[str, Any]) -> None:
        """Refuse, before anything is written, what the contract would call a violation of this writer."""
        kind, turn, intent = record["kind"], record.get("turn"), record.get("intent")
        if kind == "turn_planned":
            lineage = record.get("lineage")
            if not isinstance(lineage, str) or not lineage:
                raise RecordRefused("a turn's lineage must be a non-empty string (lineage_missing)")
            if turn in self._planned and self._planned[turn] != lineage:
                raise RecordRefused(f"turn {turn!r} is planned with another lineage (lineage_conflict)")
            phases = record.get("phases")
            if phases is not None and (
                not isinstance(phases, list)
                or not phases
                or len(set(phases)) != len(phases)
                or not all(isinstance(p, str) and p for p in phases)
            ):
                raise RecordRefused("phases must be a non-empty list of distinct phase names")
        if kind in ("turn_planned", "phase_committed", "intent_dispatched", "effect_observed", "turn_terminal"):
            _nonempty_str(turn, "turn")
            if kind != "turn_planned" and turn not in self._planned:
                raise RecordRefused(f"turn {turn!r} is not planned in this journal (unknown_turn)")
        if kind == "phase_committed":
            _nonempty_str(record.get("phase"), "phase")
        elif kind == "intent_dispatched":
            _nonempty_str(intent, "intent")
            cls, key = record.get("effect_class"), record.get("idempotency_key")
            if cls not in EFFECT_CLASSES:
                raise RecordRefused(f"effect_class must be one of {', '.join(EFFECT_CLASSES)}")
            if cls == "idempotent" and (not isinstance(key, str) or not key):
                raise RecordRefused("an idempotent intent needs an idempotency_key (idempotency_key_missing)")
            known = self._intents.get((turn, intent))  # type: ignore[arg-type]
            if known is not None:
                if (known.effect_class, known.key) != (cls, key):
                    raise RecordRefused(f"intent {intent!r} was dispatched with another class or key (intent_conflict)")
                if cls == "unsafe" and known.outcome != "failed":
                    raise UnsafeRedispatch(
                        f"unsafe intent {turn}/{intent} was dispatched and its readback is "
                        f"{known.outcome or 'missing'}: a second dispatch would be a second effect"
                    )
        elif kind == "effect_observed":
            _nonempty_str(intent, "intent")
            if (turn, intent) not in self._intents:
                raise RecordRefused(f"intent {turn}/{intent} was never dispatched (intent_unknown)")
            if record.get("outcome") not in OUTCOMES:
                raise RecordRefused(f"outcome must be one of {', '.join(OUTCOMES)}")
        elif kind == "turn_terminal":
            if record.get("status") not in STATUSES:
                raise RecordRefused(f"status must be one of {', '.join(STATUSES)}")
        elif kind == "fork":
            from_lsn, lsn = record.get("from_lsn"), record["lsn"]
            if type(from_lsn) is not int or not -1 <= from_lsn < lsn:
                raise RecordRefused(f"from_lsn must be -1 to {lsn - 1}: a fork rewinds to before itself")
            if record.get("new_branch") != self._highest + 1:
                raise RecordRefused("new_branch is the next branch number; let fork() choose it")
            _nonempty_str(record.get("reason"), "reason")
        elif kind == "checkpoint":
            covers = record.get("covers_lsn")
            if type(covers) is not int or not -1 <= covers < record["lsn"]:
                raise RecordRefused("covers_lsn must be below the checkpoint's own lsn")
            _nonempty_str(record.get("state_digest"), "state_digest")

    def _write(self, data: bytes) -> None:
        fd = self._fd
        assert fd is not None
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            # What reached the file is unknown (a part of the line, perhaps): the next open says.
            self._broken = f"{type(exc).__name__}: {exc}"
            raise JournalError(f"{self.path}: the write did not complete ({self._broken})") from exc

    # -- the record kinds --------------------------------------------------------------------------------
    def plan(self, turn: str, lineage: str, *, phases: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        """``turn_planned``: the turn exists; ``phases`` its plan (default: the contract's seven)."""
        fields: dict[str, Any] = {"turn": turn, "lineage": lineage, **extra}
        if phases is not None:
            fields["phases"] = list(phases)
        return self.append("turn_planned", **fields)

    def commit(self, turn: str, phase: str, **extra: Any) -> dict[str, Any]:
        """``phase_committed``: the phase's effects are durable."""
        return self.append("phase_committed", turn=turn, phase=phase, **extra)

    def dispatch(
        self,
        turn: str,
        intent: str,
        effect_class: EffectClass,
        *,
        idempotency_key: str | None = None,
        args_digest: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """``intent_dispatched``: written before the effect is sent. Refused (UnsafeRedispatch) for an
        unsafe intent whose previous dispatch has no ``failed`` readback."""
        fields: dict[str, Any] = {"turn": turn, "intent": intent, "effect_class": effect_class, **extra}
        if idempotency_key is not None:
            fields["idempotency_key"] = idempotency_key
        if args_digest is not None:
            fields["args_digest"] = args_digest
        return self.append("intent_dispatched", **fields)

    def observe(self, turn: str, intent: str, outcome: Outcome, **extra: Any) -> dict[str, Any]:
        """``effect_observed``: the readback of the intent's latest dispatch."""
        return self.append("effect_observed", turn=turn, intent=intent, outcome=outcome, **extra)

    def terminal(self, turn: str, status: Status = "completed", **extra: Any) -> dict[str, Any]:
        """``turn_terminal``: the turn is over (``completed`` needs every planned phase committed)."""
        return self.append("turn_terminal", turn=turn, status=status, **extra)

    def fork(self, from_lsn: int, reason: str, **extra: Any) -> int:
        """``fork``: rewind the live branch to its own ``from_lsn`` (-1: keep none of its own records). The
        records after it are discarded (kept as evidence); returns the new live branch."""
        with self._lock:
            new_branch = self._highest + 1
        self.append("fork", new_branch=new_branch, from_lsn=from_lsn, reason=reason, **extra)
        return new_branch

    def checkpoint(
        self, covers_lsn: int, state_digest: str, *, state: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """``checkpoint``: the folded state of the live timeline through ``covers_lsn``. ``state_digest`` must
        be the digest of the server's canonical fold (its ``fold_state``); this client does not compute the
        fold, and a digest that does not match is ``checkpoint_mismatch``, which blocks the whole run."""
        fields: dict[str, Any] = {"covers_lsn": covers_lsn, "state_digest": state_digest, **extra}
        if state is not None:
            fields["state"] = state
        return self.append("checkpoint", **fields)

    @contextlib.contextmanager
    def effect(
        self,
        turn: str,
        intent: str,
        effect_class: EffectClass,
        *,
        idempotency_key: str | None = None,
        args_digest: str | None = None,
        failed_on: tuple[type[BaseException], ...] = (),
        write_ahead: bool | None = None,
        local_write_ahead: bool = False,
        **extra: Any,
    ) -> Iterator[Effect]:
        """Run a side effect between its dispatch and its readback, the dispatch written (fsynced) locally
        before the block runs::

            with journal.effect("t1", "save-note", "idempotent", idempotency_key="run-42/t1/note"):
                notes.save(...)

        An unsafe effect (or one with ``write_ahead=True``) needs its dispatch acknowledged by the server
        under the turn's fencing token before it runs: use a turn session (``Gate.turn(...).effect``). Here
        it is refused (``WriteAheadRequired``, nothing written) unless ``local_write_ahead=True``: the
        dispatch is then only local, which protects against a crash but not against a stalled worker whose
        turn another worker took over (both would send).

        The readback after the block:

        - the block returns: ``succeeded`` (or what it set with ``effect.failed()`` / ``effect.unknown()``);
        - it raises :class:`~loopx_client.errors.EffectFailed`, or one of ``failed_on`` (exception types the
          caller knows mean "the receiver refused, nothing happened"): ``failed``;
        - it raises anything else, KeyboardInterrupt included: ``unknown``. Fail closed: an exception
          may come after the effect reached the world (a timeout on the reply), so it never means
          ``failed`` unless the caller says so. An unsafe intent left ``unknown`` holds the turn at the
          gate until an operator gives evidence.

        The exception is re-raised after its readback is written. A process killed inside the block writes
        no readback at all: the gate sees the dispatch alone, which is the same as ``unknown``."""
        needs_authority = write_ahead if write_ahead is not None else effect_class == "unsafe"
        if needs_authority and not local_write_ahead:
            raise WriteAheadRequired(
                f"{turn}/{intent}: this {effect_class} effect runs only after the server acknowledged its dispatch; "
                "use Gate.turn(...).effect, or local_write_ahead=True (no protection against a stalled worker)"
            )
        record = self.dispatch(
            turn, intent, effect_class, idempotency_key=idempotency_key, args_digest=args_digest, **extra
        )
        effect = Effect(turn, intent, effect_class, idempotency_key, record)
        with self.readback_of(effect, failed_on):
            yield effect

    @contextlib.contextmanager
    def readback_of(self, effect: Effect, failed_on: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """Write the readback of ``effect`` (whose dispatch is written) after the block, as ``effect`` says."""
        turn, intent = effect.turn, effect.intent
        try:
            yield
        except EffectFailed:
            effect.readback = self.observe(turn, intent, "failed")
            raise
        except failed_on:
            effect.readback = self.observe(turn, intent, "failed")
            raise
        except BaseException:
            effect.readback = self.observe(turn, intent, "unknown")
            raise
        outcome = effect.outcome or "succeeded"
        effect.readback = self.observe(turn, intent, outcome)  # type: ignore[arg-type]

    @classmethod
    def rebuild(
        cls, path: str | os.PathLike[str], *, run: str, lines: list[bytes], limits: Limits | None = None
    ) -> Journal:
        """A new local journal at ``path`` holding ``lines`` (e.g. ``Gate.records(run)``: a worker taking a
        run over from another machine starts from what the server stores). Written whole to a temporary
        file, fsynced, then renamed into place, so ``path`` is never half-written; refused when ``path``
        exists. The records are checked as on any reopen (``JournalMismatch``)."""
        target = Path(path)
        if target.exists():
            raise JournalError(f"{target}: exists; rebuild writes a new journal only")
        tmp = target.with_name(f".{target.name}.rebuild-{os.getpid()}")
        write_durably(tmp, b"".join(line + b"\n" for line in lines))
        try:
            os.link(tmp, target)  # never replaces a journal that appeared meanwhile
        except FileExistsError:
            raise JournalError(f"{target}: exists; rebuild writes a new journal only") from None
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(target.parent)
        return cls(target, run=run, limits=limits)

    # -- closing ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the file (every record written is already durable). Further writes raise JournalClosed."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r}, run={self.run!r}, records={len(self._entries)})"


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def write_durably(path: Path, data: bytes) -> None:
    """``data`` as the whole of the file at ``path`` (created or truncated), fsynced before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """A new journal's directory entry made durable too (else a crash could lose the whole file)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on a directory
        pass
    finally:
        os.close(fd)
