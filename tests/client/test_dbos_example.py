"""client/examples/dbos_agent.py, the support agent as a real DBOS workflow: its system database imported
with `import_history --from dbos` is complete after a clean run, and blocked on the send after a SIGKILL
inside it. LoopX adds no line to the program; the client README states its line count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from certification.server import PROJECT_ROOT
from engine import assess
from recovery.imports.importers import effect_map_parse, history_import_file

EXAMPLE = PROJECT_ROOT / "client" / "examples" / "dbos_agent.py"
EFFECTS = effect_map_parse({"lookup_ticket": "safe", "save_note": "idempotent", "send_reply": "unsafe"})
README_LINES = 26  # what client/README.md says: the program's lines that are not blank


def run_agent(db: Path, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENT_CRASH_AT"}
    if crash_at:
        env["AGENT_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(db)],
        cwd=db.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("crash_at", "expected"), [(None, ("complete", None)), ("send", ("blocked", "effect_indeterminate"))]
)
def test_the_dbos_agent_imported(tmp_path, crash_at, expected):
    db = tmp_path / "agent.sqlite"
    proc = run_agent(db, crash_at)
    assert proc.returncode == (-9 if crash_at else 0), proc.stdout + proc.stderr
    (run,) = history_import_file(source="dbos", path=db, effects=EFFECTS).runs
    (turn,) = assess(run.journal.splitlines()).turns
    assert (turn.decision.value, turn.reason) == expected


def test_the_readme_counts_the_dbos_agent():
    lines = [line for line in EXAMPLE.read_text().split('"""', 2)[2].splitlines() if line.strip()]
    assert len(lines) == README_LINES
