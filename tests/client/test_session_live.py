"""Turn sessions against a live server whose claim lease is a few seconds: the README's pattern runs a
turn end to end, and a worker stalled past its lease never sends its unsafe effect after another worker
took the turn over. The world is an effect ledger file: each effect that reached it is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from loopx_client import (
    Fenced,
    Gate,
    Journal,
    LeaseLost,
    NothingToRecover,
    RecordTooLarge,
    ShipDiverged,
    canonical_bytes,
    digest,
)

from certification.server import PROJECT_ROOT, LiveServer
from tests.client.conftest import SHORT_LEASE_SECONDS
from tests.client.stall_worker import run_turn

WORKER = Path(__file__).with_name("stall_worker.py")


def ledger(path: Path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["effect"] for line in lines)


def stored(gate: Gate, run: str) -> list[dict]:
    return [json.loads(line) for line in gate.records(run)]


def takeover(server: LiveServer, tmp_path: Path, run: str, world: Path) -> Gate:
    """Worker B, on another machine: its journal rebuilt from what the server stores, then the same code."""
    gate = Gate(server.base_url, server.token, backoff=0.05)
    with Journal.rebuild(tmp_path / "b.jsonl", run=run, lines=gate.records(run)) as journal:
        run_turn(gate, journal, run, world, "worker-b")
    return gate


def wait_stopped(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    raise AssertionError("the worker did not stop itself")


def test_the_quick_start_pattern_runs_a_turn_end_to_end(short_lease_server, tmp_path):
    gate = Gate(short_lease_server.base_url, short_lease_server.token, backoff=0.05)
    world = tmp_path / "world.jsonl"
    with Journal(tmp_path / "j.jsonl", run="session-1") as journal:
        run_turn(gate, journal, "session-1", world, "worker-a")
        assert gate.ship(journal).stored == 0  # the session shipped everything at its end
        # A second pass is a no-op: the gate says done, nothing runs again.
        run_turn(gate, journal, "session-1", world, "worker-a")
    assert ledger(world) == {"t1/draft": 1, "t1/send": 1}
    answer = gate.decision("session-1", "t1")
    assert (answer.state, answer.decision) == ("done", "complete")
    kinds = [r["kind"] for r in stored(gate, "session-1")]
    assert kinds.count("turn_terminal") == 1 and kinds.count("intent_dispatched") == 3


def test_a_worker_stalled_before_its_write_ahead_is_fenced_and_the_send_happens_once(short_lease_server, tmp_path):
    server, run, world = short_lease_server, "stall-1", tmp_path / "world.jsonl"
    env = {**os.environ, "LOOPX_TOKEN": server.token, "PYTHONPATH": f"{PROJECT_ROOT / 'client'}:{PROJECT_ROOT}"}
    a = subprocess.Popen(
        [sys.executable, str(WORKER), server.base_url, run, str(tmp_path / "a.jsonl"), str(world), "worker-a",
         "before-write-ahead"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_stopped(a.pid)  # A's send is dispatched locally (fsynced), not yet acknowledged by the server
        time.sleep(SHORT_LEASE_SECONDS + 0.5)  # A's lease runs out while it is stopped
        gate = takeover(server, tmp_path, run, world)  # B claims the turn and completes it, the send included
        assert ledger(world) == {"t1/draft": 1, "t1/send": 1}
        os.kill(a.pid, signal.SIGCONT)  # A wakes and ships its dispatch under its old token
        out, err = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()  # our own child, by its handle
            a.wait()
    outcome = json.loads(out.strip().splitlines()[-1])
    assert a.returncode == 4 and outcome["outcome"] == "fenced", out + err
    assert outcome["turn"] == "t1" and outcome["current"] > outcome["token"]
    # The world saw the send once, B's; the server holds one dispatch of it, B's bytes, and none of A's.
    sends = [json.loads(line) for line in world.read_text().splitlines() if "t1/send" in line]
    assert [s["by"] for s in sends] == ["worker-b"]
    records = stored(gate, run)
    dispatches = [r for r in records if r["kind"] == "intent_dispatched" and r["intent"] == "send"]
    b_lines = (tmp_path / "b.jsonl").read_bytes().splitlines()
    assert len(dispatches) == 1 and canonical_bytes(dispatches[0]) in b_lines
    a_send = [line for line in (tmp_path / "a.jsonl").read_bytes().splitlines() if b'"intent":"send"' in line]
    assert a_send and not {digest(json.loads(line)) for line in a_send} & {digest(r) for r in records}
    answer = gate.decision(run, "t1")
    assert (answer.state, answer.decision) == ("done", "complete")


def test_a_worker_that_did_not_renew_is_refused_locally_and_its_records_are_fenced(short_lease_server, tmp_path):
    server, run, world = short_lease_server, "stall-2", tmp_path / "world.jsonl"
    gate_a = Gate(server.base_url, server.token, backoff=0.05)
    with Journal(tmp_path / "a.jsonl", run=run) as journal:
        with pytest.raises(LeaseLost), gate_a.turn(journal, "t1", lineage="ticket-1", worker_id="worker-a",
                                                   keep_lease=False) as t:
            t.commit("plan", "envelope")
            time.sleep(SHORT_LEASE_SECONDS + 0.5)  # a stall with nobody renewing: the lease runs out
            gate_b = takeover(server, tmp_path, run, world)
            t.call("send", "unsafe", lambda: ledger(world).update(["never"]), max_duration=0.5)
        assert not journal.dispatched("t1", "send")  # refused before anything was written
        with pytest.raises(Fenced) as fenced:
            gate_a.ship(journal)  # A's own records (its commits) under its old token
        assert (fenced.value.turn, fenced.value.token, fenced.value.current) == ("t1", 1, 2)
    assert ledger(world) == {"t1/draft": 1, "t1/send": 1}
    assert (gate_b.decision(run, "t1").state, gate_b.decision(run, "t1").decision) == ("done", "complete")


def test_a_record_over_the_servers_line_limit_is_refused_and_the_turn_goes_on(short_lease_server, tmp_path):
    gate = Gate(short_lease_server.base_url, short_lease_server.token, backoff=0.05)
    limit = gate.limits().max_line_bytes
    with (
        Journal(tmp_path / "j.jsonl", run="limits-1") as journal,
        gate.turn(journal, "t1", lineage="llm-output", worker_id="worker-a") as t,
    ):
        assert journal.limits.max_line_bytes == limit  # the session gave the journal the server's limits
        before = (tmp_path / "j.jsonl").read_bytes()
        with pytest.raises(RecordTooLarge):
            t.commit("plan", output="x" * limit)  # an LLM's output, journaled whole: never written
        assert (tmp_path / "j.jsonl").read_bytes() == before
        t.commit("plan", output_digest="sha256 of the output, stored elsewhere")
        t.complete()
    answer = gate.decision("limits-1", "t1")
    assert (answer.state, answer.decision) == ("done", "complete")


def test_a_worker_killed_before_its_write_ahead_was_acknowledged_resumes_without_an_operator(
    short_lease_server, tmp_path
):
    """The send's dispatch is on the local disk, never acknowledged: its body cannot have run. The restarted
    worker journals it `failed` and sends once, without holding the turn for a person."""
    server, run, world = short_lease_server, "killed-1", tmp_path / "world.jsonl"
    env = {**os.environ, "LOOPX_TOKEN": server.token, "PYTHONPATH": f"{PROJECT_ROOT / 'client'}:{PROJECT_ROOT}"}
    args = [sys.executable, str(WORKER), server.base_url, run, str(tmp_path / "a.jsonl"), str(world), "worker-a"]
    first = subprocess.run([*args, "kill-before-write-ahead"], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
    assert first.returncode == -9, first.stdout + first.stderr
    assert "t1/send" not in ledger(world)
    second = subprocess.run([*args, "none"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert second.returncode == 0 and json.loads(second.stdout.splitlines()[-1]) == {"outcome": "done"}, (
        second.stdout + second.stderr
    )
    assert ledger(world) == {"t1/draft": 1, "t1/send": 1}
    gate = Gate(server.base_url, server.token)
    sends = [r for r in stored(gate, run) if r.get("intent") == "send"]
    assert [(r["kind"], r.get("outcome"), r.get("source")) for r in sends] == [
        ("intent_dispatched", None, None), ("effect_observed", "failed", "not_acknowledged"),
        ("intent_dispatched", None, None), ("effect_observed", "succeeded", None),
    ]
    answer = gate.decision(run, "t1")
    assert (answer.state, answer.decision) == ("done", "complete")


def test_the_servers_limits_and_lease_as_the_client_reads_them(short_lease_server, tmp_path):
    gate = Gate(short_lease_server.base_url, short_lease_server.token)
    limits = gate.limits()
    assert (limits.max_line_bytes, limits.max_batch_bytes, limits.max_batch_records) == (262144, 8388608, 10000)
    assert limits.claim_lease_seconds == SHORT_LEASE_SECONDS
    with Journal(tmp_path / "j.jsonl", run="lease-1") as journal:
        journal.plan("t1", "job", phases=["only"])
        gate.ship(journal)
        before = time.monotonic()
        claim = gate.claim("lease-1", "t1", "worker-a")
        assert claim.lease_seconds == SHORT_LEASE_SECONDS and claim.expires_at.tzinfo is not None
        assert before <= claim.deadline - SHORT_LEASE_SECONDS <= time.monotonic()
        journal.commit("t1", "only")
        journal.terminal("t1")
        gate.ship(journal)
        gate.release(claim)
        assert gate.decision("lease-1", "t1").state == "done"
        with pytest.raises(NothingToRecover):  # a finished turn is never handed out again
            gate.claim("lease-1", "t1", "worker-b")


def test_a_stale_owner_that_lost_its_cursors_is_told_fenced_not_diverged(short_lease_server, tmp_path):
    """After a lost answer the client asks the server's cursors again, and they are beyond the local journal
    (another worker took the turn over and wrote it): a stale token is still told `Fenced`."""
    server, run = short_lease_server, "stale-cursor-1"
    gate_a = Gate(server.base_url, server.token, backoff=0.05)
    with Journal(tmp_path / "a.jsonl", run=run) as journal:
        journal.plan("t1", "job")
        gate_a.ship(journal)
        claim_a = gate_a.claim(run, "t1", "worker-a")
        journal.commit("t1", "plan")
        gate_a.ship(journal)
        time.sleep(SHORT_LEASE_SECONDS + 0.5)  # A stalls; its lease runs out
        gate_b = Gate(server.base_url, server.token, backoff=0.05)
        with Journal.rebuild(tmp_path / "b.jsonl", run=run, lines=gate_b.records(run)) as b:
            claim_b = gate_b.claim(run, "t1", "worker-b")
            for phase in ("envelope", "dispatch", "execute"):
                b.commit("t1", phase)
            gate_b.ship(b)
        journal.commit("t1", "envelope")  # A wakes and goes on
        gate_a._acked.clear()  # as after an answer lost: the cursors are asked again
        with pytest.raises(Fenced) as fenced:
            gate_a.ship(journal)
        assert (fenced.value.turn, fenced.value.token, fenced.value.current) == (
            "t1", claim_a.fencing_token, claim_b.fencing_token
        )
        unclaimed = Gate(server.base_url, server.token)  # no token for the turn: a plain divergence
        with pytest.raises(ShipDiverged):
            unclaimed.ship(journal)
    assert len(gate_b.records(run)) == 5  # nothing of A's stored
