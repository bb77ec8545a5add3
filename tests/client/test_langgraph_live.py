"""LoopX live inside LangGraph (loopx_client.langgraph) against a live server: client/examples/langgraph_agent.py,
a real LangGraph graph with a fake chat model, a read, a keyed write and an unsafe send, run in a
subprocess SIGKILLed inside each node, then resumed. The send never repeats without an operator; the keyed
write is sent again with its key; the console shows the thread as a run with its turns; and the thread's
checkpoint database imported afterwards (recovery/imports/importers/langgraph.py) gives the live journal's
decisions, step by step."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from loopx_client import Gate, TurnHeld
from loopx_client.langgraph import DurabilityNotSync, EffectOutsideGraph, LoopxCheckpointer, effect, step_turn

from certification.server import PROJECT_ROOT, LiveServer
from engine import assess
from recovery.imports.importers import effect_map_parse, history_import
from tests.client.conftest import operator_approves

EXAMPLE = PROJECT_ROOT / "client" / "examples" / "langgraph_agent.py"
sys.path.insert(0, str(EXAMPLE.parent))
from langgraph_agent import CRASH_POINTS  # noqa: E402  (the example's own list: every node is tested)

# What the import is told of the graph's nodes: the classes the tools inside them declare.
EFFECTS = effect_map_parse({"agent": "safe", "lookup": "safe", "save": "idempotent", "send": "unsafe"})


def _run_async(coroutine: Any) -> Any:
    """``asyncio.run`` in a thread of its own: the browser tests' Playwright (a session's fixture) keeps an
    event loop running in the main thread, where ``asyncio.run`` refuses to start another."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def agent(
    server: LiveServer, work: Path, thread: str, crash_at: str | None = None, resume: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(EXAMPLE), "--db", str(work / "agent.sqlite"), "--thread", thread]
    if resume is not None:
        args += ["--resume", resume]
    env = {
        **os.environ,
        "LOOPX_URL": server.base_url,
        "LOOPX_TOKEN": server.token,
        "AGENT_LEDGER": str(work / "world.jsonl"),
        "PYTHONPATH": str(PROJECT_ROOT / "client"),
    }
    env.pop("AGENT_CRASH_AT", None)
    if crash_at:
        env["AGENT_CRASH_AT"] = crash_at
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)


def ledger(work: Path) -> list[dict[str, str]]:
    path = work / "world.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def decisions(lines: list[bytes]) -> dict[str, str]:
    return {t.turn: t.decision.value for t in assess(lines).turns}


def imported(work: Path, run: str) -> dict[str, str]:
    """The thread's checkpoint database as `import_history --from langgraph` reads it, once a process
    has folded its write-ahead log in (docs/imports.md: writes still in a -wal file are not in the file)."""
    db = work / "agent.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (result,) = history_import(source="langgraph", data=db.read_bytes(), effects=EFFECTS).runs
    assert result.run == run
    return decisions(result.journal.splitlines())


def same_steps(live: dict[str, str], other: dict[str, str], parents: dict[str, str | None]) -> None:
    """Every live step `step:<P>` has the import's decision of the same step: `checkpoint:<C>` for the
    checkpoint C made from P, `pending:<P>` for the step still due from P."""
    children = {parent: child for child, parent in parents.items() if parent is not None}
    first = next(child for child, parent in parents.items() if parent is None)
    for turn, decision in live.items():
        step = turn.removeprefix("step:")
        if step == "start":
            assert other[f"checkpoint:{first}"] == decision, (turn, live, other)
        elif step in children:
            assert other[f"checkpoint:{children[step]}"] == decision, (turn, live, other)
        else:
            assert other[f"pending:{step}"] == decision, (turn, live, other)


def checkpoints(work: Path) -> dict[str, str | None]:
    with contextlib.closing(sqlite3.connect(work / "agent.sqlite")) as conn:
        return dict(conn.execute("SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints"))


def console_lists(server: LiveServer, run: str) -> str:
    """The console's run list and the run's turns, as a signed-in operator sees them."""
    return server._manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from journals.models import Run\n"
        "user, _ = User.objects.get_or_create(username='console-reader', is_superuser=True, is_staff=True)\n"
        "client = Client()\n"
        "client.force_login(user)\n"
        f"runs = client.get('/runs/', {{'q': {run!r}}})\n"
        f"pk = Run.objects.get(run_id={run!r}).pk\n"
        "run = client.get('/runs/%d/' % pk)\n"
        f"turns = client.get('/turns/', {{'run': {run!r}, 'per_page': 100}})\n"
        "print(runs.status_code, run.status_code, turns.status_code)\n"
        "print(runs.content.decode())\n"
        "print(run.content.decode())\n"
        "print(turns.content.decode())\n",
    )


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_graph_killed_inside_each_node_resumes_without_repeating_the_send(live_server_for_client, tmp_path, crash_at):
    server = live_server_for_client
    thread = f"lg-{crash_at}"
    run = f"langgraph-{thread}"
    gate = Gate(server.base_url, server.token)
    first = agent(server, tmp_path, thread, crash_at)
    assert first.returncode == -9, first.stdout + first.stderr  # SIGKILLed inside the node

    # The import of the checkpoint database decides each step as the live journal does.
    live = decisions((tmp_path / f"{run}.jsonl").read_bytes().splitlines())
    same_steps(live, imported(tmp_path, run), checkpoints(tmp_path))
    pending = {turn: d for turn, d in live.items() if d != "complete"}
    expected = {"agent": None, "lookup": "resume", "save": "resume", "send": "blocked"}[crash_at]
    assert list(pending.values()) == ([expected] if expected else []), live

    proc = agent(server, tmp_path, thread)
    if crash_at == "send":
        # The send reached the mailer and its readback never did: the gate holds the step before LangGraph
        # re-runs anything, naming the intent and the turn's page in the console.
        assert proc.returncode == 3, proc.stdout + proc.stderr
        held = json.loads(proc.stdout.strip().splitlines()[-1])
        assert held["held"].startswith("tool:send:send_reply:") and held["turn"] == next(iter(pending))
        assert held["console"].startswith(f"{server.base_url}/turns/?run={run}&q=step")
        assert gate.decision(run, held["turn"]).state == "hold"  # until an operator decides
        # The operator looks at the mailer: it went out.
        operator_approves(
            server,
            run,
            held["turn"],
            {held["held"]: "happened"},
            actor="ops-1",
            reason="the mailer's log shows the reply",
        )
        proc = agent(server, tmp_path, thread)
        assert proc.returncode == 4, proc.stdout + proc.stderr  # LangGraph's interrupt carries the finding in
        (question,) = json.loads(proc.stdout.strip().splitlines()[-1])["interrupt"]
        assert (question["loopx"], question["intent"]) == ("effect_happened", held["held"])
        proc = agent(server, tmp_path, thread, resume="sent")  # Command(resume=...): what the send returned
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"done": "sent"}

    world = ledger(tmp_path)
    effects = Counter(entry["effect"] for entry in world)
    assert effects["send"] == 1  # never twice
    saves = [entry["key"] for entry in world if entry["effect"] == "save"]
    assert saves == ["note/1234"] * (2 if crash_at == "save" else 1)  # sent again with the same key
    assert effects["lookup"] == (2 if crash_at == "lookup" else 1)  # a read runs again

    # Every step is complete, live and on the server; the console shows the thread as a run with its turns.
    live = decisions((tmp_path / f"{run}.jsonl").read_bytes().splitlines())
    assert set(live.values()) == {"complete"} and len(live) == len(checkpoints(tmp_path))
    for turn in live:
        answer = gate.decision(run, turn)
        assert (answer.state, answer.decision) == ("done", "complete"), answer.body
    same_steps(live, imported(tmp_path, run), checkpoints(tmp_path))
    if crash_at != "send":
        return  # the console is read once, for the run that went through every path
    page = console_lists(server, run)
    assert "200 200 200" in page.splitlines(), page[:400]
    # The console shortens long turn ids: each turn by the start of its id and its own page.
    assert run in page and all(turn[:30] in page for turn in live)
    assert len(set(re.findall(r'href="/turns/(\d+)/"', page))) == len(live)


def test_the_adapter_is_at_most_ten_lines_of_the_agent():
    """The example's adapter lines end in `# loopx`: without them it is the same agent on LangGraph alone."""
    text = EXAMPLE.read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    adapter = [line for line in lines if line.rstrip().endswith("# loopx")]
    plain = "\n".join(line for line in text.splitlines() if not line.rstrip().endswith("# loopx"))
    compile(plain, "langgraph_agent_plain.py", "exec")  # still a program
    assert "loopx" not in plain.replace("# loopx", "").split('"""', 2)[2]
    plain_lines = [line for line in plain.splitlines() if line.strip()]
    # client/README.md says so: 112 lines that are not blank with the adapter, 102 without, 10 of the adapter.
    assert (len(lines), len(plain_lines), len(adapter)) == (112, 102, 10)


def test_the_async_methods_journal_an_async_graph_on_a_memory_saver(live_server_for_client, tmp_path):
    """`ainvoke` on an in-memory saver: the async checkpointer methods journal each step, an async unsafe
    tool runs only after the server acknowledged its dispatch, a held step raises from `aget_tuple`, and an
    operator's "it did not happen" sends it again."""

    sent: list[str] = []

    @tool
    @effect("unsafe")
    async def page_oncall(text: str) -> str:
        """Page the person on call."""
        sent.append(text)
        if len(sent) == 1:
            raise TimeoutError("the pager did not answer")  # it may have gone out: unknown
        return "paged"

    async def pager(state: MessagesState) -> dict[str, object]:
        return {"messages": [await page_oncall.ainvoke({"text": "disk full"})]}

    builder = StateGraph(MessagesState)
    builder.add_node("pager", pager)
    builder.add_edge(START, "pager")
    builder.add_edge("pager", END)
    gate = Gate(live_server_for_client.base_url, live_server_for_client.token)
    with LoopxCheckpointer(InMemorySaver(), gate, journal_dir=tmp_path, worker_id="async-1") as checkpointer:
        graph = builder.compile(checkpointer=checkpointer)
        config: Any = {"configurable": {"thread_id": "async-pager"}}
        with pytest.raises(TimeoutError):
            _run_async(graph.ainvoke({"messages": []}, config, durability="sync"))
        with pytest.raises(TurnHeld) as held:  # the page is unknown: the gate holds the step, nothing re-runs
            _run_async(graph.ainvoke(None, config, durability="sync"))
        assert held.value.intent is not None and held.value.intent.startswith("tool:pager:page_oncall:")
        assert sent == ["disk full"]
        # The operator finds that the page never went out: the tool runs again, once.
        turn, intent = held.value.turn, held.value.intent
        operator_approves(
            live_server_for_client,
            "langgraph-async-pager",
            turn,
            {intent: "not_happened"},
            actor="ops-2",
            reason="the pager's log has no page",
        )
        result = _run_async(graph.ainvoke(None, config, durability="sync"))
        assert result["messages"][-1].content == "paged" and sent == ["disk full", "disk full"]
    lines = (tmp_path / "langgraph-async-pager.jsonl").read_bytes().splitlines()
    records = [json.loads(line) for line in lines]
    dispatches = [r for r in records if r["kind"] == "intent_dispatched"]
    assert [(r["write_ahead"], r["effect_class"], r["intent"]) for r in dispatches] == [
        ("server", "unsafe", intent)
    ] * 2
    # unknown (the timeout), the operator's finding that it did not happen, then the page that went out
    assert [r["outcome"] for r in records if r["kind"] == "effect_observed"] == ["unknown", "failed", "succeeded"]
    assert set(decisions(lines).values()) == {"complete"}


def test_effect_declarations_are_checked_and_unsafe_tools_run_only_in_a_loopx_graph():
    with pytest.raises(ValueError):
        effect("idempotent")  # no key
    with pytest.raises(ValueError):
        effect("unsafe", key="k")
    with pytest.raises(ValueError):
        effect("write")  # type: ignore[arg-type]

    @effect("unsafe")
    def send(text: str) -> str:
        raise AssertionError("an unsafe tool never runs without a turn to journal it in")

    @effect("read")
    def look(text: str) -> str:
        return text.upper()

    with pytest.raises(EffectOutsideGraph):
        send("hello")
    assert look("hello") == "HELLO"  # a read needs no turn


def test_the_wrapped_saver_keeps_the_checkpoints_and_a_step_without_effects_is_a_turn(live_server_for_client, tmp_path):
    def echo(state: MessagesState) -> dict[str, object]:
        return {"messages": [("ai", "hello")]}

    builder = StateGraph(MessagesState)
    builder.add_node("echo", echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    inner = InMemorySaver()
    gate = Gate(live_server_for_client.base_url, live_server_for_client.token)
    with LoopxCheckpointer(inner, gate, journal_dir=tmp_path, worker_id="plain-1") as checkpointer:
        config: Any = {"configurable": {"thread_id": "plain"}}
        graph = builder.compile(checkpointer=checkpointer)
        with pytest.raises(DurabilityNotSync):  # LangGraph's default saves a step's checkpoint too late
            graph.invoke({"messages": [("user", "hi")]}, config)
        assert list(inner.list(config)) == []  # nothing ran
        graph.invoke({"messages": [("user", "hi")]}, config, durability="sync")
        saved = [c.config for c in checkpointer.list(config)]
        assert saved == [c.config for c in inner.list(config)] and len(saved) == 3
        lines = (tmp_path / "langgraph-plain.jsonl").read_bytes().splitlines()
        # A turn per saved checkpoint, named after the checkpoint its step ran from, each complete.
        parents = [None, *[c.config["configurable"]["checkpoint_id"] for c in reversed(list(inner.list(config)))][:-1]]
        assert decisions(lines) == {step_turn(parent): "complete" for parent in parents}
        checkpointer.delete_thread("plain")
        assert list(inner.list(config)) == []
