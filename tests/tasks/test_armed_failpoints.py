"""Armed failpoints (kernel/failpoints.py): a kill placed at a named point for one key, taken by the first
process that reaches it, once; the others, and other keys, go on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernel.failpoints import ARM_DIR_ENV, arm_file

ROOT = Path(__file__).resolve().parents[2]


def reach(arm_dir: Path, name: str, key: str) -> int:
    """A child process that reaches ``name`` for ``key`` and then exits 0: its return code."""
    code = f"from kernel.failpoints import failpoint; failpoint({name!r}, key={key!r}); print('went on')"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={ARM_DIR_ENV: str(arm_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, check=False,
    )
    return proc.returncode


def test_an_armed_kill_fires_once_for_its_key_only(tmp_path: Path) -> None:
    (tmp_path / arm_file("ingest.before_commit", "run-7")).write_text("kill")
    assert reach(tmp_path, "ingest.before_commit", "run-8") == 0  # another run goes on
    assert reach(tmp_path, "other.point", "run-7") == 0  # another point too
    assert reach(tmp_path, "ingest.before_commit", "run-7") == -9  # SIGKILL, right there
    assert reach(tmp_path, "ingest.before_commit", "run-7") == 0  # once: the restarted process goes on
    fired = list(tmp_path.glob("ingest.before_commit@run-7.*.fired"))
    assert len(fired) == 1 and fired[0].read_text() == "kill"


def test_an_arm_without_a_key_fires_for_any_key(tmp_path: Path) -> None:
    (tmp_path / arm_file("assess.before_store")).write_text("kill")
    assert reach(tmp_path, "assess.before_store", "whatever") == -9
    assert reach(tmp_path, "assess.before_store", "whatever") == 0


def test_an_unknown_action_is_refused_loudly(tmp_path: Path) -> None:
    (tmp_path / arm_file("p", "k")).write_text("explode")
    assert reach(tmp_path, "p", "k") == 1  # ValueError: a typo in a test's arm never passes silently
