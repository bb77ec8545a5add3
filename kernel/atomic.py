"""The one atomic-write helper: every file the project writes outside the database goes through it.

A write goes to a hidden temporary sibling named for the writer (pid and process start time), is flushed and
fsynced, renamed over the target in one step, and the directory is fsynced so that the rename itself is
durable. A crash or a kill at any moment leaves the old file (or no file) readable, never a partial one.

The temporary names carry the writer's identity so that leftovers of dead writers can be recognised and
removed by :func:`clean_stale_temporaries` without ever touching the file of a writer that is still running.
Plain Python, no Django.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "clean_stale_temporaries",
    "fsync_directory",
    "is_process_alive",
    "process_start_time",
    "temporary_sibling",
]

StrPath = str | os.PathLike[str]

# Kinds of temporaries: files of atomic_write, directories of restore_package.
WRITE_KIND = "loopx-tmp"
RESTORE_KIND = "loopx-restore"

_TEMP_RE = re.compile(
    r"^\.(?P<base>.*)\.(?P<kind>loopx-tmp|loopx-restore)\.(?P<pid>\d+)\.(?P<start>\d+)\.(?P<rand>[0-9a-f]{8})$",
    re.DOTALL,
)
# Keep temporary names well under NAME_MAX (255 bytes) whatever the target's name.
_BASE_MAX_BYTES = 120


def process_start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot (Linux), or 0 where that cannot be known.

    A pid alone can be reused by an unrelated process after the writer died; pid plus start time cannot.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return 0
    # The command name (field 2) is in parentheses and may hold spaces or parentheses: parse after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of proc(5); fields[0] is field 3
    except (IndexError, ValueError):
        return 0


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    state = raw[raw.rfind(b")") + 2 :][:1]
    return state in (b"Z", b"X")


def is_process_alive(pid: int, start_time: int = 0) -> bool:
    """True while the process that wrote a temporary may still be using it.

    A zombie counts as gone (it can no longer write). When both start times are known and differ, the pid was
    reused by another process, which counts as gone too. Unknown cases count as alive: never remove a live
    writer's file.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return True
    if _is_zombie(pid):
        return False
    if start_time:
        current = process_start_time(pid)
        if current and current != start_time:
            return False
    return True


_OWN_START: int | None = None
_OWN_START_PID: int | None = None


def _own_identity() -> tuple[int, int]:
    global _OWN_START, _OWN_START_PID
    pid = os.getpid()
    if _OWN_START is None or pid != _OWN_START_PID:  # recomputed after a fork
        _OWN_START = process_start_time(pid)
        _OWN_START_PID = pid
    return pid, _OWN_START


def temporary_sibling(path: StrPath, kind: str = WRITE_KIND) -> Path:
    """A fresh hidden sibling name of ``path`` for this process: ``.<name>.<kind>.<pid>.<start>.<random>``."""
    target = Path(os.fspath(path))
    base = target.name.encode("utf-8", "surrogateescape")[:_BASE_MAX_BYTES].decode("utf-8", "ignore")
    pid, start = _own_identity()
    return target.with_name(f".{base}.{kind}.{pid}.{start}.{secrets.token_hex(4)}")


def parse_temporary_name(name: str) -> tuple[str, int, int] | None:
    """``(kind, pid, start_time)`` for a name made by :func:`temporary_sibling`, else None."""
    match = _TEMP_RE.match(name)
    if match is None:
        return None
    return match["kind"], int(match["pid"]), int(match["start"])


def fsync_directory(directory: StrPath) -> None:
    """Make the entries of ``directory`` (a rename, a new file) durable."""
    fd = os.open(os.fspath(directory), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - some filesystems cannot fsync a directory
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def clean_stale_temporaries(directory: StrPath, kinds: tuple[str, ...] = (WRITE_KIND, RESTORE_KIND)) -> list[Path]:
    """Remove the leftovers of dead writers (and interrupted restores) in ``directory``; returns what went.

    Only names made by :func:`temporary_sibling`, owned by this user, whose process is gone are touched.
    """
    removed: list[Path] = []
    try:
        names = os.listdir(os.fspath(directory))
    except FileNotFoundError:
        return removed
    for name in names:
        parsed = parse_temporary_name(name)
        if parsed is None or parsed[0] not in kinds:
            continue
        kind, pid, start = parsed
        if is_process_alive(pid, start):
            continue
        entry = Path(os.fspath(directory)) / name
        try:
            info = entry.lstat()
        except FileNotFoundError:
            continue
        if info.st_uid != os.geteuid():
            continue
        try:
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue  # another cleaner got there first
        except OSError:
            continue  # cleaning is best effort: a leftover that cannot go must not stop the caller's work
        removed.append(entry)
    return removed


# A test-only hook: LOOPX_TEST_PAUSE_AT=NAME:K makes the Kth call of failpoint(NAME) in the process announce
# itself on stderr and sleep, so that a test can SIGKILL the process at exactly that step. Counting per name
# keeps the steps well defined when several threads reach failpoints. Unset, a failpoint costs one comparison.
_PAUSE_NAME, _, _PAUSE_K = os.environ.get("LOOPX_TEST_PAUSE_AT", "").partition(":")
_PAUSE_AT = int(_PAUSE_K or "1") if _PAUSE_NAME else 0
_failpoint_lock = threading.Lock()
_failpoints_seen: dict[str, int] = {}


def failpoint(name: str) -> None:
    """Mark a step at which a kill must be survivable (see tests/packages/test_kill.py)."""
    if not _PAUSE_AT or name != _PAUSE_NAME:
        return
    with _failpoint_lock:
        seen = _failpoints_seen[name] = _failpoints_seen.get(name, 0) + 1
    if seen == _PAUSE_AT:
        sys.stderr.write(f"loopx-failpoint {name}:{seen}\n")
        sys.stderr.flush()
        while True:  # wait for the SIGKILL
            time.sleep(60)


@contextlib.contextmanager
def atomic_write(path: StrPath, mode: int = 0o600) -> Iterator[IO[bytes]]:
    """Write ``path`` atomically: ``with atomic_write(path) as fh: fh.write(...)``.

    ``mode`` is the permission of the new file (exactly; the umask does not apply). The handle is binary and
    opened for reading too (``w+b``), so that a writer may seek back and hash what it wrote before the rename.
    If the block raises, the temporary is removed and the old file is untouched.
    """
    target = Path(os.fspath(path))
    tmp = temporary_sibling(target, WRITE_KIND)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, mode)
    try:
        os.fchmod(fd, mode)
        handle = os.fdopen(fd, "w+b")
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    try:
        with handle:
            yield handle
            handle.flush()
            failpoint("atomic.written")
            os.fsync(handle.fileno())
            failpoint("atomic.synced")
        os.replace(tmp, target)
        failpoint("atomic.renamed")
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_directory(target.parent)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def atomic_write_bytes(path: StrPath, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, mode) as fh:
        fh.write(data)


def atomic_write_text(path: StrPath, data: str, mode: int = 0o600, *, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``data`` encoded as ``encoding``, atomically."""
    atomic_write_bytes(path, data.encode(encoding), mode)
