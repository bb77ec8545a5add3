"""The TypeScript client (client-ts/) held to the same contract as the engine and the Python client.

- A journal the TypeScript client writes (keys beyond U+FFFF, escapes, integers beyond 2^53 as BigInt, a
  fork, every kind of effect) is assessed by the engine (`manage.py assess_journal --json`) with no
  violation, and each of its lines is the engine's canonical bytes of itself.
- The Python client and the TypeScript client append to the same run in turn, each continuing the chain
  the other wrote, against a live server: the server stores it all and every turn is complete.
- A TypeScript worker stalled between writing an unsafe dispatch and shipping it, whose turn another worker
  took over meanwhile, is fenced by the server: its body never runs, and the send happens once.
- client-ts/examples/agent-loop.ts, crashed (SIGKILL) at each of its crash points and restarted until it is
  done, against a live server: every turn complete, and the effect ledger shows each effect exactly once.

client-ts is built here (`npm ci` from its lock file when node_modules is missing or older than the lock,
then `tsc`); without Node.js 20+ these tests skip with the reason, and fail with LOOPX_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certification.server import PROJECT_ROOT, LiveServer
from engine import assess
from engine.canonical import parse_line
from tests.client.conftest import operator_approves
from tests.conftest import REQUIRE_SERVICES

CLIENT_TS = PROJECT_ROOT / "client-ts"
EXPECTED = {"t1/draft": 1, "t1/reply": 1, "t2/archive": 1}  # the safe read is no effect


def _unavailable(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"LOOPX_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)


@pytest.fixture(scope="session")
def node() -> Iterator[str]:
    """The path of `node`, with client-ts built (dist/) from its lock file."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("needs Node.js 20+ (node and npm on PATH) for the TypeScript client")
    assert node is not None and npm is not None
    version = _run([node, "--version"], timeout=60).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        _unavailable(f"needs Node.js 20+ for the TypeScript client (found {version})")
    installed = CLIENT_TS / "node_modules" / ".package-lock.json"
    lock = CLIENT_TS / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = _run([npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENT_TS, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    built = _run([node, str(CLIENT_TS / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "tsconfig.json"],
                 cwd=CLIENT_TS, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    yield node


def run_script(node: str, tmp_path: Path, source: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run an ESM script that imports the built client as `loopx`; its stdout."""
    script = tmp_path / f"script-{hashlib.sha256(source.encode()).hexdigest()[:8]}.mjs"
    index = (CLIENT_TS / "dist" / "src" / "index.js").as_uri()
    script.write_text(f"import * as loopx from {json.dumps(index)};\n" + textwrap.dedent(source), encoding="utf-8")
    proc = _run([node, str(script), *args], env={**os.environ, **(env or {})}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def assess_json(path: Path) -> dict[str, Any]:
    proc = _run([sys.executable, "manage.py", "assess_journal", str(path), "--json"], cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


# --- a journal written by the TypeScript client, assessed by the engine -------------------------------------

WRITE_JOURNAL = r"""
const [path] = process.argv.slice(2);
const j = loopx.Journal.open(path, { run: "ts-cross-1" });
j.plan("t1", "job-\u{1F600}", {
  extra: { "\uFB01": 1, "\u{1F600}": 2, nested: { "\u{10FFFF}": "max", "\uFFFF": "bmp" } },
});
j.commit("t1", "plan", { big: 18446744073709551616n, neg: -9007199254740993n, max: 9223372036854775807n });
j.commit("t1", "envelope", { note: "caf\u00e9 \"q\" \\ / \n\t \u0000\u001b\u007f\u2028\u2029 e\u0301" });
await j.effect("t1", "read", "safe", () => "inbox");
await j.effect("t1", "save", "idempotent", () => undefined, { key: "ts-cross-1/t1/save" });
await j.effect("t1", "send", "unsafe", (e) => { e.failed(); }, { localWriteAhead: true });
await j.effect("t1", "send", "unsafe", () => undefined, { localWriteAhead: true });
for (const phase of loopx.DEFAULT_PHASES.slice(2)) j.commit("t1", phase);
j.terminal("t1");
j.plan("t2", "job-2", { phases: ["plan", "act"] });
j.commit("t2", "plan");
const fork = j.fork(j.highWater().get(0) - 2, "rewind the last plan");
j.plan("t3", "job-3", { phases: ["only"] });
j.commit("t3", "only");
j.terminal("t3");
let refused = [];
for (const bad of [() => j.commit("t3", "x", { f: 1.5 }), () => j.commit("t3", "x", { n: 2 ** 60 }),
                   () => j.commit("t3", "x", { s: "\uD800" }), () => j.commit("nope", "x")]) {
  try { bad(); } catch (error) { refused.push(error.constructor.name); }
}
j.close();
const reopened = loopx.Journal.open(path, { run: "ts-cross-1" });
console.log(JSON.stringify({ fork, refused, highWater: [...reopened.highWater()] }));
reopened.close();
"""


def test_a_journal_the_typescript_client_writes_is_assessed_with_no_violation(node, tmp_path):
    path = tmp_path / "ts.jsonl"
    out = json.loads(run_script(node, tmp_path, WRITE_JOURNAL, str(path)).strip().splitlines()[-1])
    assert out["fork"] == 1 and out["highWater"][1] == [1, 2]
    assert out["refused"] == ["RecordRefused"] * 4  # a float, an inexact number, a lone surrogate, an unplanned turn
    result = assess_json(path)
    assert result["violations"] == []
    assert result["live_branch"] == 1
    assert [(t["turn"], t["decision"]) for t in result["turns"]] == [
        ("t1", "complete"), ("t2", "discarded"), ("t3", "complete")]
    lines = path.read_bytes().splitlines()
    assert len(lines) == result["records"]
    for raw in lines:  # every line is exactly its canonical bytes, by the engine's reader and by the reference
        parsed = parse_line(raw)
        assert parsed.error is None and parsed.canonical == raw
        reference = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert reference.encode("utf-8") == raw
    second = json.loads(lines[1])
    assert second["big"] == 2**64 and second["neg"] == -(2**53 + 1) and second["max"] == 2**63 - 1
    first = json.loads(lines[0])
    assert first["\ufb01"] == 1 and first["\U0001f600"] == 2 and first["lineage"] == "job-\U0001f600"
    assert lines[0].endswith('"\ufb01":1,"\U0001f600":2}'.encode())  # by code point, not by UTF-16 unit


# --- typed errors ---------------------------------------------------------------------------------------------

ERRORS = """
const out = {};
for (const [code, cls] of Object.entries(loopx.BY_CODE)) {
  const error = loopx.errorFor(cls.statusFamily, { error: code, detail: "d", line: 3 });
  out[code] = [cls.statusFamily, error.constructor === cls && error.code === code && error.line === 3];
}
console.log(JSON.stringify(out));
"""


def test_every_code_the_server_raises_has_its_typescript_class_with_its_status(node, tmp_path):
    from tests.client.test_errors import server_codes

    classes = json.loads(run_script(node, tmp_path, ERRORS).strip().splitlines()[-1])
    codes = server_codes()
    missing = sorted(set(codes) - set(classes))
    assert not missing, f"codes without a typed error in client-ts/src/errors.ts: {missing}"
    for code, status in codes.items():
        family, typed = classes[code]
        assert typed, code
        if status:
            assert family == status, (code, status, family)


# --- the two clients in turn on one run, against a live server ------------------------------------------------

TS_TURN = """
const [path, url, run] = process.argv.slice(2);
const journal = loopx.Journal.open(path, { run });
const gate = new loopx.Gate(url, process.env.LOOPX_TOKEN);
const sent = [];
const options = { lineage: "from-typescript", workerId: "ts-worker", phases: ["plan", "act"] };
await gate.turn(journal, "t2", options, async (t) => {
  await t.commit("plan");
  await t.call("fetch", "safe", () => "read");
  await t.call("send", "unsafe", () => { sent.push("send"); }, { maxDuration: 5 });
  await t.complete();
});
const shipped = await gate.ship(journal);
journal.close();
console.log(JSON.stringify({ sent, acknowledged: [...shipped.acknowledged] }));
"""


def test_the_python_and_typescript_clients_append_to_one_run_in_turn(node, live_server_for_client, tmp_path):
    from loopx_client import Gate, Journal

    server = live_server_for_client
    run, path = "cross-language-1", tmp_path / "shared.jsonl"
    gate = Gate(server.base_url, server.token)
    with Journal(path, run=run) as journal:  # Python: turn t1, complete
        journal.plan("t1", "from-python", phases=["plan", "act"])
        journal.commit("t1", "plan")
        with journal.effect("t1", "save", "idempotent", idempotency_key=f"{run}/t1/save"):
            pass
        journal.commit("t1", "act")
        journal.terminal("t1")
        gate.ship(journal)
    out = run_script(node, tmp_path, TS_TURN, str(path), server.base_url, run, env={"LOOPX_TOKEN": server.token})
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["sent"] == ["send"]
    with Journal(path, run=run) as journal:  # Python again: the chain the TypeScript client wrote continues
        assert journal.planned() == {"t1": "from-python", "t2": "from-typescript"}
        journal.plan("t3", "python-again", phases=["only"])
        journal.commit("t3", "only")
        journal.terminal("t3")
        shipped = gate.ship(journal)
        high = journal.high_water()
    assert shipped.acknowledged == high == {0: len(path.read_bytes().splitlines()) - 1}
    for turn in ("t1", "t2", "t3"):
        decision = gate.decision(run, turn, expect=high)
        assert (decision.state, decision.decision) == ("done", "complete"), decision.body
    local = assess(path)
    assert local.violations == () and [t.decision.value for t in local.turns] == ["complete"] * 3
    stored = gate.records(run)
    assert stored == path.read_bytes().splitlines()  # the server holds the very bytes both clients wrote


# --- a worker stalled past its lease, against a live server whose lease is a few seconds ------------------------

SHORT_LEASE_SECONDS = 2


@pytest.fixture(scope="module")
def short_lease_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("ts-short-lease"))
    server.env["LOOPX_CLAIM_LEASE_SECONDS"] = str(SHORT_LEASE_SECONDS)
    with server:
        yield server


STALLED = r"""
const [dir, url, run, lease] = process.argv.slice(2);
// A margin of 0.1 s (not 1 s): the server's lease here is 2 s, and the effects declare 0.2 s.
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
const sent = [];
const outcome = {};
// Worker B, on another machine: its journal rebuilt from what the server stores, then the turn to its end.
async function takeover() {
  const gate = new loopx.Gate(url, process.env.LOOPX_TOKEN);
  const journal = loopx.Journal.rebuild(`${dir}/b.jsonl`, { run, lines: await gate.records(run) });
  await gate.turn(journal, "t1", { lineage: "ticket-1", workerId: "worker-b", leaseMargin: 0.1 }, async (t) => {
    await t.call("send", "unsafe", () => { sent.push("worker-b"); }, { maxDuration: 0.2 });
    await t.complete();
  });
  journal.close();
}
// Worker A stalls between writing its dispatch and shipping it (a GC pause, SIGSTOP): its lease runs out
// and B takes the turn over meanwhile.
class StallingGate extends loopx.Gate {
  stallNext = false;
  async ship(journal) {
    if (this.stallNext) {
      this.stallNext = false;
      await sleep(Number(lease) + 0.5);
      await takeover();
    }
    return super.ship(journal);
  }
}
const gateA = new StallingGate(url, process.env.LOOPX_TOKEN, { backoff: 0.05 });
const journalA = loopx.Journal.open(`${dir}/a.jsonl`, { run });
try {
  const options = { lineage: "ticket-1", workerId: "worker-a", keepLease: false, leaseMargin: 0.1 };
  await gateA.turn(journalA, "t1", options, async (t) => {
    await t.commit("plan", "envelope");
    gateA.stallNext = true;
    await t.call("send", "unsafe", () => { sent.push("worker-a"); }, { maxDuration: 0.2 });
  });
  outcome.a = "ran";
} catch (error) {
  outcome.a = error.constructor.name;
  outcome.fenced = [error.turn, error.token, error.current];
}
outcome.readback = [journalA.readback("t1", "send"), journalA.entries.at(-1).record.source];
journalA.close();
const decision = await new loopx.Gate(url, process.env.LOOPX_TOKEN).decision(run, "t1");
console.log(JSON.stringify({ sent, outcome, decision: [decision.state, decision.decision] }));
"""


def test_a_typescript_worker_stalled_before_its_write_ahead_is_fenced_and_the_send_happens_once(
    node, short_lease_server, tmp_path
):
    server, run = short_lease_server, "ts-stall-1"
    out = run_script(node, tmp_path, STALLED, str(tmp_path), server.base_url, run, str(SHORT_LEASE_SECONDS),
                     env={"LOOPX_TOKEN": server.token})
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["sent"] == ["worker-b"]  # A's body never ran: the server refused its dispatch first
    assert answer["outcome"]["a"] == "Fenced"
    turn, token, current = answer["outcome"]["fenced"]
    assert turn == "t1" and current > token
    assert answer["outcome"]["readback"] == ["failed", "not_sent"]  # A's own journal says it was not sent
    assert answer["decision"] == ["done", "complete"]
    from loopx_client import Gate, canonical_bytes, digest

    gate = Gate(server.base_url, server.token)
    records = [json.loads(line) for line in gate.records(run)]
    dispatches = [r for r in records if r["kind"] == "intent_dispatched" and r["intent"] == "send"]
    assert len(dispatches) == 1 and canonical_bytes(dispatches[0]) in (tmp_path / "b.jsonl").read_bytes().splitlines()
    a_send = [line for line in (tmp_path / "a.jsonl").read_bytes().splitlines() if b'"intent":"send"' in line]
    assert a_send and not {digest(json.loads(line)) for line in a_send} & {digest(r) for r in records}


# --- the worked example, crashed at every point ----------------------------------------------------------------


def crash_points(node: str) -> list[str]:
    out = _run([node, str(CLIENT_TS / "dist" / "examples" / "agent-loop.js"), "--list-crash-points"], timeout=60)
    assert out.returncode == 0, out.stderr
    points: list[str] = json.loads(out.stdout)
    return points


def agent(
    node: str, server: LiveServer, work: Path, run: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [node, str(CLIENT_TS / "dist" / "examples" / "agent-loop.js"), "--url", server.base_url, "--run", run,
            "--journal", str(work / "journal.jsonl"), "--ledger", str(work / "world.jsonl"), "--inbox",
            str(work / "inbox.txt")]
    if crash_at:
        args += ["--crash-at", crash_at]
    return _run(args, env={**os.environ, "LOOPX_TOKEN": server.token}, timeout=300)


def ledger(work: Path) -> Counter[str]:
    path = work / "world.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["effect"] for line in lines)


@pytest.mark.slow
def test_the_typescript_agent_loop_recovers_from_a_crash_at_every_point(node, live_server_for_client, tmp_path):
    from loopx_client import Gate

    server = live_server_for_client
    gate = Gate(server.base_url, server.token)
    points = crash_points(node)
    assert len(points) == 10
    for crash_at in [None, *points]:
        work = tmp_path / (crash_at or "clean")
        work.mkdir()
        run = f"ts-example-{crash_at or 'clean'}"
        (work / "inbox.txt").write_text("Can we meet on Tuesday?\n")
        first = agent(node, server, work, run, crash_at)
        if crash_at is None:
            assert first.returncode == 0, first.stdout + first.stderr
        else:
            assert first.returncode == -9, (crash_at, first.stdout + first.stderr)  # SIGKILLed at the point
        approvals: list[str] = []
        for _ in range(3):
            proc = agent(node, server, work, run)
            if proc.returncode == 0:
                break
            assert proc.returncode == 3, (crash_at, proc.stdout + proc.stderr)
            held = json.loads(proc.stdout.strip().splitlines()[-1])["held"]
            assert held == {"t1": "effect_indeterminate"}, (crash_at, held)
            # The operator looks at the world: was the reply sent before the crash?
            finding = "happened" if ledger(work)["t1/reply"] else "not_happened"
            operator_approves(
                server, run, "t1", {"reply": finding}, actor="ops-1", reason=f"checked the mailer: {finding}"
            )
            approvals.append(finding)
        else:
            raise AssertionError(f"{crash_at}: the agent did not finish after three restarts")
        assert ledger(work) == EXPECTED, crash_at
        if crash_at in ("t1-reply-dispatched", "t1-reply-sent"):
            assert approvals == ["not_happened" if crash_at == "t1-reply-dispatched" else "happened"], crash_at
        else:
            assert approvals == [], crash_at  # nothing else needs a person
        for turn in ("t1", "t2"):
            answer = gate.decision(run, turn)
            assert (answer.state, answer.decision) == ("done", "complete"), (crash_at, answer.body)
        local = assess(work / "journal.jsonl")
        assert local.violations == (), crash_at
        assert [t.decision.value for t in local.turns] == ["complete", "complete"], crash_at
