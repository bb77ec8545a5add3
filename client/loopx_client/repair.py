"""Dropping a torn last line of a local journal, audited.

A crash in the middle of a write can leave the journal's last line cut short: not one complete record, no
final newline. The journal then refuses to open (``JournalCorrupt`` with ``torn_tail``). Dropping that
line is safe: a write returns only after its fsync, and an effect's body runs only after its dispatch
write returned, so no effect ever ran on the strength of a torn line. The bytes are still kept: each drop
appends the removed bytes, the reason, who (user, host) and when to ``PATH.repairs.jsonl``, next to the
journal (append-only, fsynced) before the journal is cut.

Only the last line, and only when it is torn: a complete last record, damage further up, or a damaged
line that does end with a newline (not the signature of a cut-short write) is refused (``NothingToDrop``)
and nothing changes.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .canonical import parse_record
from .errors import JournalError, NothingToDrop
from .journal import fsync_dir, write_durably

try:  # POSIX: refuse while a writer holds the journal
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Dropped:
    """What ``drop_torn_tail`` removed: ``line`` (1-based), ``offset`` (its first byte), ``removed`` (the
    bytes), and the audit file the entry went to."""

    path: Path
    line: int
    offset: int
    removed: bytes
    repairs: Path


def repairs_path(path: str | os.PathLike[str]) -> Path:
    """The audit file of a journal's repairs: ``PATH.repairs.jsonl``."""
    journal = Path(path)
    return journal.with_name(journal.name + ".repairs.jsonl")


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        return f"uid:{os.getuid()}"


def _torn_tail(data: bytes) -> tuple[int, int]:
    """(line number, offset) of the torn last line of ``data``; NothingToDrop when there is none."""
    if not data:
        raise NothingToDrop("the journal is empty")
    if data.endswith(b"\n"):
        raise NothingToDrop("the journal ends with a newline: its last line was not cut short")
    parts = data.split(b"\n")
    offset = 0
    for number, raw in enumerate(parts[:-1], start=1):
        if parse_record(raw) is None:
            raise NothingToDrop(f"line {number} is not a complete record: damage above the last line")
        offset += len(raw) + 1
    if parse_record(parts[-1]) is not None:
        raise NothingToDrop("the last line is a complete record (only its newline is missing)")
    return len(parts), offset


def drop_torn_tail(path: str | os.PathLike[str], *, reason: str, who: str | None = None) -> Dropped:
    """Remove the torn last line of the journal at ``path``, keeping it in ``PATH.repairs.jsonl`` with the
    ``reason``, ``who`` (default: the user at this host) and when. ``NothingToDrop`` (nothing changed) when
    the last line is not torn; ``JournalError`` while a writer holds the journal.

    The audit entry is written (fsynced) first; the cut journal is then written whole to a temporary file,
    fsynced and renamed over the journal, so a crash leaves either the old file or the cut one."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("a reason is required: say why the torn line may go")
    journal = Path(path)
    fd = os.open(journal, os.O_RDWR)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise JournalError(f"{journal}: a writer has this journal open") from None
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        line, offset = _torn_tail(data)
        kept, removed = data[:offset], data[offset:]
        audit = repairs_path(journal)
        entry = {
            "action": "drop_torn_tail",
            "at": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "who": who or f"{_who()}@{socket.gethostname()}",
            "reason": reason.strip(),
            "journal": journal.name,
            "line": line,
            "offset": offset,
            "removed_bytes": len(removed),
            "removed_base64": base64.b64encode(removed).decode("ascii"),
            "removed_sha256": hashlib.sha256(removed).hexdigest(),
            "before_sha256": hashlib.sha256(data).hexdigest(),
            "after_sha256": hashlib.sha256(kept).hexdigest(),
        }
        created = not audit.exists()
        with open(audit, "ab") as log:
            log.write(json.dumps(entry, sort_keys=True).encode() + b"\n")
            log.flush()
            os.fsync(log.fileno())
        if created:
            fsync_dir(audit.parent)
        tmp = journal.with_name(f".{journal.name}.drop-{os.getpid()}")
        write_durably(tmp, kept)
        os.replace(tmp, journal)
        fsync_dir(journal.parent)
    finally:
        os.close(fd)
    return Dropped(journal, line, offset, removed, audit)


__all__ = ["Dropped", "drop_torn_tail", "repairs_path"]
