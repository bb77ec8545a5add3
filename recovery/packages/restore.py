"""``restore_package``: verify completely, then unpack into a fresh hidden sibling and rename it into place.

A SIGKILL at any moment leaves either no target or the complete target: the tree is built in
``.<target>.loopx-restore.<pid>.<start>.<random>`` (files 0600, directories 0700, archive modes never
applied), every file and directory is fsynced, and one rename publishes it. The next restore into the same
parent removes such siblings whose process is gone. The unpacking pass reads the archive again through the
same open file and must see exactly what verification saw (names, kinds, sizes, sha256); if anything differs
the archive changed underneath us, and the temporary tree is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernel.atomic import RESTORE_KIND, clean_stale_temporaries, failpoint, fsync_directory, temporary_sibling

from . import report as codes
from ._formats import DIR, FILE, Unsupported, open_archive
from ._pipeline import Pipeline
from ._streams import MemberStop, PackageStop
from .limits import Limits
from .report import PackageReport
from .verify import PackageUsageError, PlanEntry, StrPath, open_package, verify_open_file

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_CHANGED = "the archive changed between verification and unpacking"


class _Changed(Exception):
    def __init__(self, member: str | None, detail: str = _CHANGED) -> None:
        super().__init__(detail)
        self.member = member
        self.detail = detail


def restore_package(path: StrPath, into_dir: StrPath, limits: Limits | None = None) -> PackageReport:
    """Verify the package at ``path`` and, when it is accepted and ``into_dir`` does not exist, unpack it there.

    Raises PackageUsageError when the package cannot be opened or the parent of ``into_dir`` is missing, and
    OSError when the restore itself cannot be written (disk full...), after removing what it wrote.
    """
    limits = limits or Limits()
    target = Path(os.path.abspath(os.fspath(into_dir)))
    parent = target.parent
    if not parent.is_dir():
        raise PackageUsageError(f"the parent directory of {os.fspath(into_dir)} does not exist")
    with open_package(path) as fh:
        clean_stale_temporaries(parent, (RESTORE_KIND,))
        verification = verify_open_file(fh, limits)
        report = verification.report
        if os.path.lexists(target):
            report.add(codes.TARGET_EXISTS, None, "the target directory already exists")
        if not report.accepted:
            return report
        try:
            _unpack(fh, limits, verification.plan, target)
        except _Changed as exc:
            report.add(codes.ARCHIVE_CORRUPT, exc.member, exc.detail)
        except FileExistsError:
            report.add(codes.TARGET_EXISTS, None, "the target directory appeared while unpacking")
    return report


def _fsync_path(path: Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    if directory:
        flags |= getattr(os, "O_DIRECTORY", 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
        if not directory:
            # Durable now, so its clean pages can go: the rest of the restore then writes into pages just freed
            # instead of faulting in fresh ones, which is much of a restore's kernel time, and a large restore does not
            # push everything else out of the page cache. The restored files are read from disk when used.
            with contextlib.suppress(OSError):  # advice only: a filesystem that refuses it changes nothing
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class _Syncer:
    """fsync in a thread pool while later members are still being written.

    Filesystems commit concurrent fsyncs together (ext4's group commit), so many files synced at once cost
    little more than one. Every file is still synced before the directories, and every
    directory before the rename.
    """

    def __init__(self, workers: int = 16) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loopx-fsync")
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()  # the writer lanes submit from their own threads; no future may be lost

    def submit(self, path: Path, directory: bool = False) -> None:
        with self._lock:
            if len(self._pending) >= 256:  # surface errors early and keep the list short
                for future in self._pending:
                    if future.done():
                        future.result()
                self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._pool.submit(_fsync_path, path, directory))

    def wait(self) -> None:
        """Wait for every fsync submitted so far (call once no lane is running); raise the first error."""
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _unpack(fh: io.FileIO, limits: Limits, plan: list[PlanEntry], target: Path) -> None:
    tmp = temporary_sibling(target, RESTORE_KIND)
    os.mkdir(tmp, 0o700)
    syncer = _Syncer()
    writer = _Writer(syncer)
    try:
        os.chmod(tmp, 0o700)  # the umask may have narrowed it; never widened
        failpoint("restore.tmpdir")
        directories = _write_tree(fh, limits, plan, tmp, writer)
        writer.drain()
        syncer.wait()
        failpoint("restore.files_synced")
        for directory in directories:
            syncer.submit(directory, directory=True)
        syncer.wait()
        failpoint("restore.synced")
        _rename_noreplace(tmp, target)
    except BaseException:
        writer.abort()
        syncer.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    writer.abort()
    syncer.close()
    failpoint("restore.renamed")
    fsync_directory(target.parent)


class _Writer:
    """Creates, writes and closes files on two lanes (threads, files taken in turn) while the main thread inflates
    and hashes: creating a file (ext4's inode search) and copying into the page cache are most of a restore's
    time, and both release the GIL."""

    def __init__(self, syncer: _Syncer, lanes: int = 2) -> None:
        self.lanes = [Pipeline() for _ in range(lanes)]
        self.syncer = syncer
        self.open_fds: set[int] = set()
        self._lock = threading.Lock()

    def step(self, handle: _OpenFile, chunk: bytes | None, last: bool) -> None:
        """Open the file on its first step, write ``chunk``, close it and queue its fsync on its last step: one
        hand-over per piece, and a member of one piece (most are) is a single one."""
        if handle.fd < 0:
            fd = os.open(handle.path, _FILE_FLAGS, 0o600)
            with self._lock:
                self.open_fds.add(fd)
            handle.fd = fd
            os.fchmod(fd, 0o600)
            failpoint("restore.file_open")
        if chunk:
            view = memoryview(chunk)
            while view:
                view = view[os.write(handle.fd, view) :]
        if last:
            failpoint("restore.file_written")
            with self._lock:
                self.open_fds.discard(handle.fd)
            os.close(handle.fd)
            self.syncer.submit(handle.path)

    def drain(self) -> None:
        for lane in self.lanes:
            lane.drain()

    def abort(self) -> None:
        for lane in self.lanes:
            lane.close()
        for fd in self.open_fds:
            os.close(fd)
        self.open_fds.clear()


@dataclass(slots=True)
class _OpenFile:
    path: Path
    fd: int = -1


def _write_tree(fh: io.FileIO, limits: Limits, plan: list[PlanEntry], tmp: Path, writer: _Writer) -> list[Path]:
    made: set[str] = set()
    directories: list[Path] = [tmp]

    def ensure(parts: list[str]) -> None:
        for depth in range(1, len(parts) + 1):
            rel = "/".join(parts[:depth])
            if rel in made:
                continue
            where = tmp / rel
            os.mkdir(where, 0o700)
            os.chmod(where, 0o700)
            made.add(rel)
            directories.append(where)
            failpoint("restore.mkdir")

    index = 0
    current: str | None = None
    try:
        opened = open_archive(fh, limits)
        for m in opened.members:
            current = m.name
            if index >= len(plan):
                raise _Changed(m.name)
            entry = plan[index]
            index += 1
            if (m.name, m.kind) != (entry.name, entry.kind) or (m.kind == FILE and m.size != entry.size):
                raise _Changed(m.name)
            parts = entry.path.split("/")
            if m.kind == DIR:
                if entry.path:  # "" is the archive's root ("./"), which is tmp itself
                    ensure(parts)
                continue
            ensure(parts[:-1])
            handle = _OpenFile(tmp / entry.path)
            lane = writer.lanes[index % len(writer.lanes)]
            # Re-hashed here, from the very bytes handed to the writer: what is written is what was verified. Each
            # piece is handed over when the next one has arrived, so the last is written once the hash is checked.
            digest = hashlib.sha256()
            done = 0
            held: bytes | None = None
            for chunk in m.chunks():
                done += len(chunk)
                if done > entry.size:
                    raise _Changed(entry.name)
                digest.update(chunk)
                if held is not None:
                    lane.submit(writer.step, handle, held, False)
                held = chunk
            if done != entry.size or digest.hexdigest() != entry.sha256:
                raise _Changed(entry.name)
            lane.submit(writer.step, handle, held, True)
        current = None
    except (PackageStop, MemberStop, Unsupported):
        raise _Changed(current) from None
    if index != len(plan):
        raise _Changed(None)
    return directories


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _renameat2() -> object | None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.renameat2
    return None


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` in one step, failing (FileExistsError) if ``dst`` exists, even as an empty
    directory, which plain rename(2) would silently replace."""
    func = _renameat2()
    if func is not None:
        result = func(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)  # type: ignore[operator]
        if result == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), os.fspath(dst))
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), os.fspath(dst))
    # No renameat2 here: check, then rename (a narrow race, documented in docs/packages.md).
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst))
    os.rename(src, dst)
