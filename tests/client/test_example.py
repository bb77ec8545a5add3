"""client/examples/agent_loop.py against a live server, crashed (SIGKILL) at each of its crash points and
restarted until it is done: every turn complete, and the effect ledger shows each effect exactly once.
Where the crash leaves an unsafe send without a readback, the gate holds the turn and the test plays the
operator: it looks at the world (the ledger) and gives the evidence, as a person would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from certification.server import PROJECT_ROOT, LiveServer
from engine import assess
from tests.client.conftest import operator_approves

EXAMPLE = PROJECT_ROOT / "client" / "examples" / "agent_loop.py"
sys.path.insert(0, str(EXAMPLE.parent))
from agent_loop import CRASH_POINTS  # noqa: E402  (the example's own list: every point is tested)

EXPECTED = {"t1/draft": 1, "t1/reply": 1, "t2/archive": 1}  # the safe read is no effect


def agent(server: LiveServer, work: Path, run: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(EXAMPLE), "--url", server.base_url, "--run", run, "--journal",
            str(work / "journal.jsonl"), "--ledger", str(work / "world.jsonl"), "--inbox", str(work / "inbox.txt")]
    if crash_at:
        args += ["--crash-at", crash_at]
    env = {**os.environ, "LOOPX_TOKEN": server.token, "PYTHONPATH": str(PROJECT_ROOT / "client")}
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)


def ledger(work: Path) -> Counter[str]:
    path = work / "world.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["effect"] for line in lines)


def decision(server: LiveServer, run: str, turn: str) -> dict:
    import urllib.request

    url = f"{server.base_url}/api/v1/runs/{run}/turns/{turn}/decision"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", [None, *CRASH_POINTS])
def test_the_agent_loop_recovers_from_a_crash_at_every_point(live_server_for_client, tmp_path, crash_at):
    server = live_server_for_client
    run = f"example-{crash_at or 'clean'}"
    (tmp_path / "inbox.txt").write_text("Can we meet on Tuesday?\n")
    first = agent(server, tmp_path, run, crash_at)
    if crash_at is None:
        assert first.returncode == 0, first.stdout + first.stderr
    else:
        assert first.returncode == -9, first.stdout + first.stderr  # SIGKILLed at the point
    approvals: list[str] = []
    for _ in range(3):
        proc = agent(server, tmp_path, run)
        if proc.returncode == 0:
            break
        assert proc.returncode == 3, proc.stdout + proc.stderr
        held = json.loads(proc.stdout.strip().splitlines()[-1])["held"]
        assert held == {"t1": "effect_indeterminate"}, held
        # The operator looks at the world: was the reply sent before the crash?
        finding = "happened" if ledger(tmp_path)["t1/reply"] else "not_happened"
        operator_approves(server, run, "t1", {"reply": finding}, actor="ops-1", reason=f"checked the mailer: {finding}")
        approvals.append(finding)
    else:
        raise AssertionError("the agent did not finish after three restarts")
    assert ledger(tmp_path) == EXPECTED
    if crash_at in ("t1-reply-dispatched", "t1-reply-sent"):
        assert approvals == ["not_happened" if crash_at == "t1-reply-dispatched" else "happened"]
    else:
        assert approvals == []  # nothing else needs a person
    for turn in ("t1", "t2"):
        answer = decision(server, run, turn)
        assert (answer["state"], answer["decision"]) == ("done", "complete"), answer
    local = assess(tmp_path / "journal.jsonl")
    assert local.violations == () and [t.decision.value for t in local.turns] == ["complete", "complete"]
