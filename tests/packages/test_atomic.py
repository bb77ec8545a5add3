"""kernel.atomic: the one atomic-write helper (the kill tests are in test_kill.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.atomic import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_text,
    clean_stale_temporaries,
    is_process_alive,
    parse_temporary_name,
    process_start_time,
    temporary_sibling,
)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_writes_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"one")
    assert target.read_bytes() == b"one"
    atomic_write_text(target, "tw\u00f6")
    assert target.read_bytes() == "tw\u00f6".encode()
    assert os.listdir(tmp_path) == ["f.json"]


def test_mode_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomic_write_bytes(tmp_path / "a", b"x", mode=0o640)
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o7777 == 0o640
    atomic_write_bytes(tmp_path / "b", b"x")
    assert (tmp_path / "b").stat().st_mode & 0o7777 == 0o600


def test_an_error_inside_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write(b"new, partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_handle_can_read_back_before_the_rename(tmp_path: Path) -> None:
    with atomic_write(tmp_path / "f") as fh:
        fh.write(b"abc")
        fh.seek(0)
        assert fh.read() == b"abc"
        assert not (tmp_path / "f").exists()  # nothing visible until the block ends
    assert (tmp_path / "f").read_bytes() == b"abc"


def test_replaces_a_symlink_without_following_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    link = tmp_path / "link"
    link.symlink_to(outside)
    atomic_write_bytes(link, b"new")
    assert outside.read_bytes() == b"keep"
    assert not link.is_symlink() and link.read_bytes() == b"new"


def test_temporary_names_carry_the_writer(tmp_path: Path) -> None:
    name = temporary_sibling(tmp_path / "state.json").name
    parsed = parse_temporary_name(name)
    assert name.startswith(".state.json.loopx-tmp.")
    assert parsed == ("loopx-tmp", os.getpid(), process_start_time(os.getpid()))
    long_name = temporary_sibling(tmp_path / ("\u00e9" * 200)).name
    assert len(long_name.encode()) < 255 and parse_temporary_name(long_name) is not None
    assert parse_temporary_name("state.json") is None
    assert parse_temporary_name(".x.loopx-tmp.12.0.nothex!") is None


def test_liveness(tmp_path: Path) -> None:
    me = os.getpid()
    assert is_process_alive(me, process_start_time(me))
    assert is_process_alive(me)
    assert not is_process_alive(_dead_pid())
    assert not is_process_alive(0)
    # the pid is alive but started at another time: a reused pid, so the writer is gone
    assert not is_process_alive(me, process_start_time(me) + 1)


def test_a_zombie_counts_as_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(2000):  # up to 20 s on a loaded machine
            if not is_process_alive(proc.pid):
                break
            __import__("time").sleep(0.01)
        assert not is_process_alive(proc.pid)  # exited, not yet reaped
    finally:
        proc.wait()


def test_clean_stale_temporaries(tmp_path: Path) -> None:
    dead = _dead_pid()
    stale_file = tmp_path / f".f.loopx-tmp.{dead}.0.0123abcd"
    stale_file.write_bytes(b"partial")
    stale_dir = tmp_path / f".d.loopx-restore.{dead}.0.89abcdef"
    (stale_dir / "state").mkdir(parents=True)
    (stale_dir / "state" / "x").write_bytes(b"x")
    live = temporary_sibling(tmp_path / "mine")
    live.write_bytes(b"in progress")
    unrelated = tmp_path / ".f.loopx-tmp.notapid"
    unrelated.write_bytes(b"")
    other = tmp_path / "f"
    other.write_bytes(b"")
    removed = clean_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([stale_file, stale_dir])
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, unrelated.name, "f"])
    # kinds can be chosen: restore only cleans its own
    stale_file.write_bytes(b"partial")
    assert clean_stale_temporaries(tmp_path, ("loopx-restore",)) == []
    assert clean_stale_temporaries(tmp_path / "missing") == []
