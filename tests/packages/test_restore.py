"""restore_package and build_package: verify first, atomic publication, modes, round trips, target_exists."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from recovery.packages import (
    Limits,
    PackageUsageError,
    build_package,
    check_package,
    restore_package,
)
from recovery.packages import report as codes
from recovery.packages import restore as restore_module

from .crafting import FORMATS, RUN, E, journal, make_archive, package_entries, tar_bytes, write

ODD_JOURNAL = journal(torn_tail=False) + b'{"run":"run-1", "spaced" : true}\r\n{"v":2,"run":"run-1","x":"\xc3\xa9"}'


def tree(root: Path) -> dict[str, tuple[str, int, bytes | None]]:
    """Every entry under root: relative path -> (kind, permission bits, bytes for files)."""
    out: dict[str, tuple[str, int, bytes | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            info = full.lstat()
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"
            out[str(full.relative_to(root))] = (
                kind,
                info.st_mode & 0o7777,
                full.read_bytes() if kind == "file" else None,
            )
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_build_check_restore_round_trip(tmp_path: Path, fmt: str) -> None:
    state = {"a.json": b'{"a":1}', "deep/er/b.bin": os.urandom(3 * 1024 * 1024 + 7), "empty": b""}
    package = tmp_path / "pkg.bin"
    digest = build_package(package, RUN, ODD_JOURNAL, state, fmt=fmt)
    assert digest == hashlib.sha256(package.read_bytes()).hexdigest()
    assert package.stat().st_mode & 0o777 == 0o600
    report = check_package(package)
    assert report.accepted and report.format == fmt and report.members == 5
    target = tmp_path / "restored"
    report = restore_package(package, target)
    assert report.to_dict() == {"accepted": True, "format": fmt, "members": 5, "findings": []}
    got = tree(target)
    assert got["journal.jsonl"] == ("file", 0o600, ODD_JOURNAL)  # byte-identical, torn and odd bytes included
    for rel, data in state.items():
        assert got[f"state/{rel}"] == ("file", 0o600, data)
    for rel in ("state", "state/deep", "state/deep/er"):
        assert got[rel] == ("dir", 0o700, None)
    assert target.stat().st_mode & 0o7777 == 0o700
    manifest = json.loads(got["manifest.json"][2] or b"")
    assert manifest["run"] == RUN and manifest["format"] == "loopx-recovery-package"
    assert sorted(os.listdir(tmp_path)) == ["pkg.bin", "restored"]  # no temporary left beside it


def test_build_is_deterministic_and_validates(tmp_path: Path) -> None:
    for fmt in FORMATS:
        one = build_package(tmp_path / "one", RUN, b"{}\n", {"x": b"1"}, fmt=fmt)
        two = build_package(tmp_path / "two", RUN, b"{}\n", {"x": b"1"}, fmt=fmt)
        assert one == two
    with pytest.raises(ValueError):
        build_package(tmp_path / "bad", RUN, b"", {"../x": b""})
    with pytest.raises(ValueError):
        build_package(tmp_path / "bad", RUN, b"", {"a": b"", "A": b""})
    with pytest.raises(ValueError):
        build_package(tmp_path / "bad", RUN, b"", {"a": b"", "a/b": b""})
    with pytest.raises(ValueError):
        build_package(tmp_path / "bad", "", b"")
    with pytest.raises(ValueError):
        build_package(tmp_path / "bad", RUN, b"", fmt="rar")
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_archive_modes_are_never_applied(tmp_path: Path, fmt: str) -> None:
    entries = package_entries(dirs=True)
    data = make_archive(fmt, entries)
    if fmt != "zip":  # rewrite every tar mode to setuid, world-writable
        out = io.BytesIO()
        with (
            tarfile.open(fileobj=io.BytesIO(tar_bytes(entries))) as src,
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf,
        ):
            for member in src.getmembers():
                member.mode = 0o6777
                tf.addfile(member, src.extractfile(member) if member.isfile() else None)
        data = out.getvalue() if fmt == "tar" else __import__("gzip").compress(out.getvalue())
    path = tmp_path / "pkg"
    path.write_bytes(data)
    old = os.umask(0)
    try:
        report = restore_package(path, tmp_path / "out")
    finally:
        os.umask(old)
    assert report.accepted, report.to_dict()
    for rel, (kind, mode, _) in tree(tmp_path / "out").items():
        assert mode == (0o700 if kind == "dir" else 0o600), rel


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("existing", ["dir", "empty-dir", "file", "dangling-symlink"])
def test_target_exists(tmp_path: Path, fmt: str, existing: str) -> None:
    path = write(tmp_path, fmt, package_entries())
    target = tmp_path / "out"
    if existing == "dir":
        target.mkdir()
        (target / "keep").write_bytes(b"mine")
    elif existing == "empty-dir":
        target.mkdir()
    elif existing == "file":
        target.write_bytes(b"mine")
    else:
        target.symlink_to(tmp_path / "nowhere")
    before = tree(tmp_path)
    report = restore_package(path, target)
    assert report.codes() == [codes.TARGET_EXISTS]
    assert report.format == fmt and report.members == 4
    assert tree(tmp_path) == before


def test_target_exists_is_reported_with_the_other_findings(tmp_path: Path) -> None:
    path = write(tmp_path, "tar", package_entries(extra=[E("../evil", b"x")]))
    (tmp_path / "out").mkdir()
    assert set(restore_package(path, tmp_path / "out").codes()) == {codes.PATH_TRAVERSAL, codes.TARGET_EXISTS}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_rejected_package_creates_nothing(tmp_path: Path, fmt: str) -> None:
    path = write(tmp_path, fmt, package_entries(extra=[E("state/link", kind="symlink", target="/etc")]))
    before = sorted(os.listdir(tmp_path))
    report = restore_package(path, tmp_path / "out")
    assert report.codes() == [codes.LINK_MEMBER]
    assert sorted(os.listdir(tmp_path)) == before


def test_usage_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "tar", package_entries())
    with pytest.raises(PackageUsageError):
        restore_package(path, tmp_path / "missing-parent" / "out")
    with pytest.raises(PackageUsageError):
        restore_package(tmp_path / "missing.tar", tmp_path / "out")
    with pytest.raises(PackageUsageError):
        check_package(tmp_path / "missing.tar")
    with pytest.raises(PackageUsageError):
        check_package(tmp_path)  # a directory
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(PackageUsageError):
        check_package(tmp_path / "fifo")  # refused without opening (which would block)
    assert not (tmp_path / "out").exists()


def _tamper_after_verification(monkeypatch: pytest.MonkeyPatch, tamper) -> None:
    real = restore_module.verify_open_file

    def verify_then_tamper(fh, limits):
        result = real(fh, limits)
        tamper()
        return result

    monkeypatch.setattr(restore_module, "verify_open_file", verify_then_tamper)


@pytest.mark.parametrize("fmt", FORMATS)
def test_archive_changed_in_place_between_check_and_unpack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    path = write(tmp_path, fmt, package_entries(state={"state/a": b"A" * 5000, "state/b": b"B" * 5000}))
    other = make_archive(fmt, package_entries(state={"state/a": b"a" * 5000, "state/b": b"B" * 5000}))

    def rewrite_same_inode() -> None:
        with open(path, "r+b") as fh:  # same inode: the open descriptor sees it
            fh.write(other)
            fh.truncate()

    _tamper_after_verification(monkeypatch, rewrite_same_inode)
    report = restore_package(path, tmp_path / "out")
    assert report.codes() == [codes.ARCHIVE_CORRUPT]
    assert "changed between verification and unpacking" in report.findings[0].detail
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no target, no temporary


@pytest.mark.parametrize("fmt", FORMATS)
def test_archive_replaced_by_rename_is_not_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """The restore reads through the descriptor it verified: a new file renamed over the path is irrelevant."""
    path = write(tmp_path, fmt, package_entries(state={"state/a": b"original"}))
    evil = write(tmp_path, fmt, package_entries(state={"state/a": b"replaced"}), name="evil")
    _tamper_after_verification(monkeypatch, lambda: os.replace(evil, path))
    report = restore_package(path, tmp_path / "out")
    assert report.accepted
    assert (tmp_path / "out" / "state" / "a").read_bytes() == b"original"


def test_target_appearing_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "tar.gz", package_entries())
    target = tmp_path / "out"
    real = restore_module._write_tree

    def write_then_race(*args, **kwargs):
        result = real(*args, **kwargs)
        target.mkdir()  # an empty directory: a plain rename(2) would silently replace it
        return result

    monkeypatch.setattr(restore_module, "_write_tree", write_then_race)
    report = restore_package(path, target)
    assert report.codes() == [codes.TARGET_EXISTS]
    assert os.listdir(target) == []
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, "out"])


def test_stale_restores_are_cleaned_and_live_ones_kept(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stale = tmp_path / f".out.loopx-restore.{proc.pid}.0.0badf00d"
    (stale / "state").mkdir(parents=True)
    (stale / "journal.jsonl").write_bytes(b"partial")
    live = restore_module.temporary_sibling(tmp_path / "other", restore_module.RESTORE_KIND)
    live.mkdir()
    path = write(tmp_path, "zip", package_entries())
    assert restore_package(path, tmp_path / "out").accepted
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, "out", live.name])
    # cleaning happens even when the restore is refused
    stale.mkdir()
    assert restore_package(path, tmp_path / "out").codes() == [codes.TARGET_EXISTS]
    assert not stale.exists()


def test_restore_enforces_limits_too(tmp_path: Path) -> None:
    path = write(tmp_path, "tar", package_entries())
    report = restore_package(path, tmp_path / "out", Limits(max_members=2))
    assert codes.TOO_MANY_MEMBERS in report.codes()
    assert not (tmp_path / "out").exists()


def test_relative_target_and_trailing_slash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "tar", package_entries())
    monkeypatch.chdir(tmp_path)
    assert restore_package(path.name, "out/").accepted
    assert (tmp_path / "out" / "journal.jsonl").is_file()


def _many_files(tmp_path: Path) -> tuple[Path, int]:
    """A package whose files are spread over both writer lanes and several directories."""
    state = {f"state/d{n % 3}/f{n:02d}": os.urandom(3000 + n) for n in range(24)}
    return write(tmp_path, "tar.gz", package_entries(state=state)), len(state) + 2  # + journal and manifest


def test_every_fsync_completes_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsyncs run in a pool beside the writing; the rename waits for all of them, files before directories."""
    path, files = _many_files(tmp_path)
    done: list[tuple[str, bool]] = []
    lock = threading.Lock()
    real_fsync = restore_module._fsync_path

    def slow_fsync(where: Path, directory: bool = False) -> None:
        time.sleep(0.02)  # slower than the writing: an unfinished fsync would show at the rename
        real_fsync(where, directory)
        with lock:
            done.append((str(where), directory))

    real_rename = restore_module._rename_noreplace
    seen_at_rename: list[list[tuple[str, bool]]] = []

    def checking_rename(src: Path, dst: Path) -> None:
        with lock:
            seen_at_rename.append(list(done))
        real_rename(src, dst)

    monkeypatch.setattr(restore_module, "_fsync_path", slow_fsync)
    monkeypatch.setattr(restore_module, "_rename_noreplace", checking_rename)
    assert restore_package(path, tmp_path / "out").accepted
    [synced] = seen_at_rename
    kinds = [directory for _, directory in synced]
    assert kinds.count(False) == files and kinds.count(True) == 5  # the tree's root, state/, three d*/
    assert kinds == sorted(kinds)  # every file before any directory


@pytest.mark.parametrize("fails", ["fsync", "write"])
def test_a_failing_fsync_or_write_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """An error on a writer lane or in the fsync pool is raised, and the temporary tree is removed."""
    path, _ = _many_files(tmp_path)
    if fails == "fsync":
        real_fsync = os.fsync
        calls = [0]

        def failing_fsync(fd: int) -> None:
            calls[0] += 1
            if calls[0] == 7:
                raise OSError(errno.EIO, "injected fsync failure")
            real_fsync(fd)

        monkeypatch.setattr(restore_module.os, "fsync", failing_fsync)
    else:
        real_write = os.write
        writes = [0]

        def failing_write(fd: int, data: bytes | memoryview) -> int:
            writes[0] += 1
            if writes[0] == 11:
                raise OSError(errno.ENOSPC, "injected disk full")
            return real_write(fd, data)

        monkeypatch.setattr(restore_module.os, "write", failing_write)
    with pytest.raises(OSError, match="injected"):
        restore_package(path, tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no target, no temporary
