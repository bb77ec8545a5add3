"""Crash-reopen: a child process writing a journal is SIGKILLed between a record's write and its fsync, and
in the middle of a write; the journal reopens as the contract says (the written record continues the
chain; a torn tail is reported, never dropped)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from loopx_client import Journal, JournalCorrupt

from engine import assess

CLIENT = Path(__file__).resolve().parents[2] / "client"

# The child writes two records, then dies at the chosen point of the third: `fsync` (after the whole line
# is written, before it is made durable) or `write` (after half of the line reached the file).
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from loopx_client import Journal, journal as module

    path, point = sys.argv[1], sys.argv[2]
    j = Journal(path, run="crash")
    j.plan("t1", "job")
    j.commit("t1", "plan")

    def die(*args):
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "fsync":
        module.os.fsync = die
    else:
        real_write = os.write
        def half(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            die()
        module.os.write = half
    j.commit("t1", "envelope")
    print("not reached")
    """
)


def run_child(path: Path, point: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path), point],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PYTHONPATH": str(CLIENT), "PATH": "/usr/bin:/bin"},
    )


def test_sigkill_between_write_and_fsync_keeps_the_written_record_and_the_journal_continues(tmp_path):
    path = tmp_path / "j.jsonl"
    proc = run_child(path, "fsync")
    assert proc.returncode == -9 and "not reached" not in proc.stdout, proc.stderr
    # The process died, not the machine: the written line is in the file (the caller was never told).
    with Journal(path, run="crash") as journal:
        assert journal.high_water() == {0: 2}
        journal.commit("t1", "dispatch")
    result = assess(path)
    assert result.violations == () and result.turns[0].completed_phases == ("plan", "envelope", "dispatch")


def test_sigkill_in_the_middle_of_a_write_leaves_a_torn_tail_that_reopening_reports(tmp_path):
    path = tmp_path / "j.jsonl"
    proc = run_child(path, "write")
    assert proc.returncode == -9, proc.stderr
    torn = path.read_bytes()
    with pytest.raises(JournalCorrupt) as caught:
        Journal(path, run="crash")
    assert caught.value.torn_tail and caught.value.line == 3
    assert path.read_bytes() == torn  # left for an operator, never truncated
    assert assess(path).violations[0].code == "storage_corruption"
