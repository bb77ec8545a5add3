"""SIGKILL at every step: a restore leaves no target or the whole target; an atomic write leaves the old file.

Real processes are killed. ``LOOPX_TEST_PAUSE_AT=NAME:K`` makes the Kth call of failpoint NAME announce itself
on stderr and sleep (kernel.atomic.failpoint), so each step can be hit exactly (counting per name keeps
steps well defined although files are written on a second thread); runs killed after random delays cover
the moments between failpoints. After each kill the next run must clean the leftovers.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernel.atomic import clean_stale_temporaries
from recovery.packages import build_package, restore_package
from recovery.packages import report as codes

from .crafting import RUN, journal

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable  # the project's venv interpreter when run as .venv/bin/pytest
RESTORE_STEPS = {
    "restore.tmpdir",
    "restore.mkdir",
    "restore.file_open",
    "restore.file_written",
    "restore.files_synced",
    "restore.synced",
    "restore.renamed",
}


def _tree(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = None
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = fh.read()
    return out


def _paused(argv: list[str], pause_at: str, cwd: Path = REPO) -> tuple[subprocess.Popen[bytes], str | None]:
    """Start ``argv`` paused at failpoint ``NAME:K``; returns the process and the failpoint's name, or None if
    the process finished without reaching it."""
    env = {**os.environ, "LOOPX_TEST_PAUSE_AT": pause_at}
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    for raw in proc.stderr:
        line = raw.decode(errors="replace")
        if line.startswith("loopx-failpoint "):
            return proc, line.split()[1].split(":")[0]
    return proc, None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()  # reaps it: a zombie would count as gone anyway, but leave nothing behind


def _make_package(root: Path, state: dict[str, bytes]) -> tuple[Path, dict[str, bytes | None]]:
    path = root / "pkg.tar.gz"
    build_package(path, RUN, journal(), state)
    assert restore_package(path, root / "expected").accepted
    return path, _tree(root / "expected")


def _check_after_kill(path: Path, parent: Path, target: Path, expected: dict[str, bytes | None]) -> None:
    """No target or the whole target; then the next run cleans the leftovers and completes the job."""
    if target.exists():
        assert _tree(target) == expected
    leftovers = [n for n in os.listdir(parent) if n != target.name]
    assert all(".loopx-restore." in n for n in leftovers), leftovers
    report = restore_package(path, target)
    assert report.accepted or report.codes() == [codes.TARGET_EXISTS]
    assert os.listdir(parent) == [target.name]
    assert _tree(target) == expected


def _steps(counts: dict[str, int]) -> list[str]:
    """Every ``NAME:K`` for the given number of calls of each failpoint, then one that never comes."""
    return [f"{name}:{k}" for name, n in counts.items() for k in range(1, n + 1)] + ["never:1"]


def _kill_at_every_step(tmp_path: Path, path: Path, argv: list[str], steps: list[str]) -> set[str]:
    """Run ``argv + [target]`` paused at each step (in parallel), SIGKILL each, check each."""

    def one(step: str) -> tuple[str, str | None, int | None]:
        parent = tmp_path / f"run-{step}"
        parent.mkdir()
        proc, name = _paused([*argv, str(parent / "out")], step)
        if name is None:
            proc.communicate()
            return step, None, proc.returncode
        _kill(proc)
        return step, name, None

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, steps))
    expected = _tree(tmp_path / "expected")
    assert [r[1] for r in results] == [s.split(":")[0] for s in steps[:-1]] + [None]  # each step was reached
    assert results[-1][2] == 0  # the run that never pauses finished normally
    for step, name, _ in results:
        parent = tmp_path / f"run-{step}"
        target = parent / "out"
        if name is None or name == "restore.renamed":
            assert _tree(target) == expected
        else:
            assert not target.exists()
        _check_after_kill(path, parent, target, expected)
    return {name for _, name, _ in results if name is not None}


def test_kill_restore_archive_at_every_step(tmp_path: Path) -> None:
    """A real ``manage.py restore_archive`` process, SIGKILLed at each of its failpoints."""
    path, _ = _make_package(tmp_path, {"x": b"state"})
    counts = dict.fromkeys(RESTORE_STEPS, 1) | {"restore.file_open": 3, "restore.file_written": 3}  # 3 files
    argv = [PYTHON, "manage.py", "restore_archive", str(path), "--json", "--into"]
    assert _kill_at_every_step(tmp_path, path, argv, _steps(counts)) == RESTORE_STEPS


def test_kill_restore_library_at_every_step(tmp_path: Path) -> None:
    """The same with more files and nested directories, through the library in a bare interpreter."""
    state = {"a.json": b'{"a": 1}', "sub/b.bin": os.urandom(200_000), "sub/deeper/c.txt": b"c" * 1000}
    path, _ = _make_package(tmp_path, state)
    script = "import sys; from recovery.packages import restore_package; restore_package(sys.argv[1], sys.argv[2])"
    counts = dict.fromkeys(RESTORE_STEPS, 1) | {"restore.mkdir": 3, "restore.file_open": 5, "restore.file_written": 5}
    argv = [PYTHON, "-c", script, str(path)]
    assert _kill_at_every_step(tmp_path, path, argv, _steps(counts)) == RESTORE_STEPS


def test_kill_restore_after_random_delays(tmp_path: Path) -> None:
    """Kills between failpoints: a larger package restored by the library in a bare interpreter."""
    path = tmp_path / "pkg.tar.gz"
    state = {f"f{n:02d}": os.urandom(300_000) for n in range(30)}
    build_package(path, RUN, journal(), state, compresslevel=1)
    assert restore_package(path, tmp_path / "expected").accepted
    expected = _tree(tmp_path / "expected")
    script = "import sys; from recovery.packages import restore_package; restore_package(sys.argv[1], sys.argv[2])"
    rng = random.Random(1234)
    for attempt in range(10):
        parent = tmp_path / f"run{attempt}"
        parent.mkdir()
        target = parent / "out"
        proc = subprocess.Popen([PYTHON, "-c", script, str(path), str(target)], cwd=REPO)
        time.sleep(rng.uniform(0.1, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if target.exists():
            assert _tree(target) == expected
        leftovers = [n for n in os.listdir(parent) if n != "out"]
        assert all(".loopx-restore." in n for n in leftovers)
        report = restore_package(path, target)
        assert report.accepted or report.codes() == [codes.TARGET_EXISTS]
        assert os.listdir(parent) == ["out"] and _tree(target) == expected


WRITER = """
import sys
from kernel.atomic import atomic_write, failpoint
path, chunks = sys.argv[1], int(sys.argv[2])
with atomic_write(path) as fh:
    for i in range(chunks):
        fh.write(bytes([65 + i]) * 65536)
        failpoint("writer.chunk")
"""


def test_kill_atomic_writer_at_every_step(tmp_path: Path) -> None:
    chunks = 8
    new = b"".join(bytes([65 + i]) * 65536 for i in range(chunks))
    old = b"the old, complete file"
    steps = _steps({"writer.chunk": chunks, "atomic.written": 1, "atomic.synced": 1, "atomic.renamed": 1})

    def one(step: str) -> tuple[str, str | None]:
        parent = tmp_path / f"w-{step}"
        parent.mkdir()
        (parent / "target").write_bytes(old)
        proc, name = _paused([PYTHON, "-c", WRITER, str(parent / "target"), str(chunks)], step)
        if name is None:
            proc.communicate()
            assert proc.returncode == 0
        else:
            _kill(proc)
        return step, name

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(one, steps))
    names = {name for _, name in results}
    assert names == {"writer.chunk", "atomic.written", "atomic.synced", "atomic.renamed", None}
    for step, name in results:
        parent = tmp_path / f"w-{step}"
        content = (parent / "target").read_bytes()
        assert content == (new if name in ("atomic.renamed", None) else old)
        clean_stale_temporaries(parent)
        assert os.listdir(parent) == ["target"]


LOOPER = """
import hashlib, itertools, sys
from kernel.atomic import atomic_write
for n in itertools.count():
    body = bytes([n % 251]) * (256 * 1024 + n)
    with atomic_write(sys.argv[1]) as fh:
        for i in range(0, len(body), 4096):
            fh.write(body[i : i + 4096])
        fh.write(hashlib.sha256(body).hexdigest().encode())
"""


def test_kill_atomic_writer_after_random_delays(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x" + hashlib.sha256(b"x").hexdigest().encode())
    rng = random.Random(99)
    for _ in range(10):
        proc = subprocess.Popen([PYTHON, "-c", LOOPER, str(target)], cwd=REPO)
        time.sleep(rng.uniform(0.1, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        content = target.read_bytes()
        body, digest = content[:-64], content[-64:]
        assert hashlib.sha256(body).hexdigest().encode() == digest  # a whole version, never a torn one
        clean_stale_temporaries(tmp_path)
        assert os.listdir(tmp_path) == ["target"]
