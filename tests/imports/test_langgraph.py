"""LangGraph databases made here with langgraph-checkpoint-sqlite's SqliteSaver (errors, interrupts, a fork
made by updating an old checkpoint, a crash before a node wrote), in the current layout and the older one,
imported and assessed."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver  # a dev dependency: missing, the tests fail, never skip
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from recovery.imports.importers import ImportRefused
from tests.imports.helpers import decisions, imported, intents, records, run_assess, run_import

SECRET = "sk-live-prompt-about-a-patient"


class State(TypedDict):
    x: int
    note: str


def _graph(
    saver: SqliteSaver, *, fail_b: bool = False, ask_c: bool = False, stop_before: list[str] | None = None
) -> Any:
    def a(s: State) -> dict[str, Any]:
        return {"x": s["x"] + 1, "note": SECRET}

    def b(s: State) -> dict[str, Any]:
        if fail_b:
            raise RuntimeError(f"the card was declined: {SECRET}")
        return {"x": s["x"] * 2}

    def c(s: State) -> dict[str, Any]:
        if ask_c:
            return {"x": s["x"] + int(interrupt(f"approve {SECRET}?"))}
        return {"x": s["x"] + 1}

    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("c", c)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=saver, interrupt_before=stop_before or [])


def database(tmp_path: Path, build: Callable[[SqliteSaver, Callable[..., Any]], None]) -> bytes:
    path = tmp_path / "checkpoints.sqlite"
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        saver = SqliteSaver(conn)
        build(saver, lambda **kw: _graph(saver, **kw))
    return path.read_bytes()


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def journals(data: bytes, effects: dict[str, str] | None = None) -> dict[str, bytes]:
    result = imported("langgraph", data, effects)
    out = {run.run: run.journal for run in result.runs}
    for journal in out.values():
        assert SECRET.encode() not in journal
    return out


def turns(journal: bytes) -> list[dict[str, Any]]:
    answer = decisions(journal)
    assert answer["violations"] == [], answer["violations"]
    return answer["turns"]  # type: ignore[no-any-return]


def test_a_finished_thread_is_one_complete_turn_per_checkpoint(tmp_path: Path) -> None:
    data = database(tmp_path, lambda saver, graph: graph().invoke({"x": 1, "note": ""}, cfg("done")))
    (journal,) = journals(data).values()
    ts = turns(journal)
    assert [t["decision"] for t in ts] == ["complete"] * 5  # input, a, b, c ... each checkpoint's step
    assert all(t["lineage"] == "langgraph:done" for t in ts)
    nodes = [r.get("node") for r in records(journal) if r["kind"] == "intent_dispatched"]
    assert nodes == ["__start__", "a", "b", "c"]
    assert journals(data) == journals(data)  # the same bytes twice


def test_an_error_is_a_failed_readback_and_the_step_resumes(tmp_path: Path) -> None:
    def build(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        with pytest.raises(RuntimeError):
            graph(fail_b=True).invoke({"x": 1, "note": ""}, cfg("err"))

    (journal,) = journals(database(tmp_path, build), {"b": "unsafe"}).values()
    last = turns(journal)[-1]
    assert last["turn"].startswith("pending:") and (last["decision"], last["resume_from"]) == ("resume", "tasks")
    assert list(intents(last).values()) == [("unsafe", "settled")]
    outcome = [r["outcome"] for r in records(journal) if r["kind"] == "effect_observed"][-1]
    assert outcome == "failed"


def test_an_interrupt_is_a_pause_not_an_effect(tmp_path: Path) -> None:
    data = database(tmp_path, lambda saver, graph: graph(ask_c=True).invoke({"x": 1, "note": ""}, cfg("ask")))
    (journal,) = journals(data).values()
    last = turns(journal)[-1]
    assert (last["decision"], last["resume_from"], last["intents"]) == ("resume", "tasks", [])
    assert imported("langgraph", data).skipped == {"__interrupt__": 1, "pause": 1}

    def resumed(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        g = graph(ask_c=True)
        g.invoke({"x": 1, "note": ""}, cfg("ask"))
        g.invoke(Command(resume=5), cfg("ask"))

    (tmp_path / "resumed").mkdir()
    (journal,) = journals(database(tmp_path / "resumed", resumed)).values()
    assert {t["decision"] for t in turns(journal)} == {"complete"}


def test_a_node_due_with_no_write_was_dispatched_with_no_readback(tmp_path: Path) -> None:
    # Stopped before b ran: the database then looks as if the process died before b wrote anything.
    data = database(tmp_path, lambda saver, graph: graph(stop_before=["b"]).invoke({"x": 1, "note": ""}, cfg("crash")))
    (journal,) = journals(data).values()
    last = turns(journal)[-1]
    assert (last["decision"], last["reason"], intents(last)) == (
        "blocked",
        "effect_indeterminate",
        {"node:b": ("unsafe", "indeterminate")},
    )
    (journal,) = journals(data, {"b": "idempotent"}).values()
    last = turns(journal)[-1]
    assert (last["decision"], last["resume_from"], intents(last)) == (
        "resume",
        "tasks",
        {"node:b": ("idempotent", "reissue")},
    )
    assert imported("langgraph", data, {"b": "idempotent"}).runs[0].decided_by["node:b"] == "b"


def test_updating_an_old_checkpoint_forks_and_the_older_line_is_discarded_evidence(tmp_path: Path) -> None:
    def build(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        g = graph()
        g.invoke({"x": 1, "note": ""}, cfg("fork"))
        history = list(g.get_state_history(cfg("fork")))
        old = next(h for h in history if h.next == ("b",))
        g.update_state(old.config, {"x": 10})

    (journal,) = journals(database(tmp_path, build)).values()
    recs = records(journal)
    forks = [r for r in recs if r["kind"] == "fork"]
    assert len(forks) == 1 and forks[0]["new_branch"] == 1
    answer = decisions(journal)
    assert answer["violations"] == [] and answer["live_branch"] == 1
    by_decision: dict[str, int] = {}
    for t in answer["turns"]:
        by_decision[t["decision"]] = by_decision.get(t["decision"], 0) + 1
    assert by_decision["discarded"] == 2  # the checkpoints after b and after c on the older line
    last = answer["turns"][-1]
    assert (
        last["branch"] == 1
        and last["turn"].startswith("pending:")
        and (last["decision"], last["reason"]) == ("blocked", "effect_indeterminate")
    )  # after the update, b is due again and nothing wrote


def test_each_thread_is_a_run_and_the_run_flag_is_their_prefix(tmp_path: Path) -> None:
    def build(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        graph().invoke({"x": 1, "note": ""}, cfg("t-1"))
        graph().invoke({"x": 2, "note": ""}, cfg("t-2"))

    data = database(tmp_path, build)
    assert [r.run for r in imported("langgraph", data).runs] == ["langgraph-t-1", "langgraph-t-2"]
    assert [r.run for r in imported("langgraph", data, run="prod").runs] == ["prod-t-1", "prod-t-2"]


OLDER_LAYOUT = """
CREATE TABLE checkpoints (
    thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TABLE writes (
    thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, type TEXT, value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
"""


def older(tmp_path: Path, current: bytes) -> bytes:
    """The same rows in the layout of langgraph-checkpoint-sqlite before `task_path` (3.0 and earlier)."""
    src, dst = tmp_path / "current.sqlite", tmp_path / "older.sqlite"
    src.write_bytes(current)
    with closing(sqlite3.connect(dst)) as conn:
        conn.executescript(OLDER_LAYOUT)
        conn.execute("ATTACH DATABASE ? AS cur", (str(src),))
        conn.execute("INSERT INTO checkpoints SELECT * FROM cur.checkpoints")
        conn.execute(
            "INSERT INTO writes SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value "
            "FROM cur.writes"
        )
        conn.commit()
    return dst.read_bytes()


def test_the_older_layout_imports_alike_but_names_no_node_of_a_write(tmp_path: Path) -> None:
    data = database(tmp_path, lambda saver, graph: graph().invoke({"x": 1, "note": ""}, cfg("old")))
    old = older(tmp_path, data)
    (journal,) = journals(old, {"a": "safe"}).values()
    assert [t["decision"] for t in turns(journal)] == ["complete"] * 5
    dispatched = [r for r in records(journal) if r["kind"] == "intent_dispatched"]
    assert all("node" not in r and r["effect_class"] == "unsafe" for r in dispatched)
    # Everything else is the same journal as the current layout's, but for the nodes' names.
    (current,) = journals(data).values()
    assert len(records(current)) == len(records(journal))


def test_the_older_layout_counts_a_due_node_as_unwritten_whatever_wrote(tmp_path: Path) -> None:
    def build(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        with pytest.raises(RuntimeError):
            graph(fail_b=True).invoke({"x": 1, "note": ""}, cfg("olderr"))

    (journal,) = journals(older(tmp_path, database(tmp_path, build))).values()
    last = turns(journal)[-1]
    assert (last["decision"], last["reason"]) == ("blocked", "effect_indeterminate")
    assert intents(last)["node:b"] == ("unsafe", "indeterminate")


def test_channel_and_write_values_are_never_copied(tmp_path: Path) -> None:
    def build(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        graph().invoke({"x": 1, "note": SECRET}, cfg("secret"))
        with pytest.raises(RuntimeError):
            graph(fail_b=True).invoke({"x": 1, "note": SECRET}, cfg("secret-2"))

    data = database(tmp_path, build)
    assert data.count(SECRET.encode()) > 0  # the database holds it ...
    for journal in journals(data).values():  # ... no journal does (journals() asserts it too)
        assert SECRET.encode() not in journal and b"declined" not in journal


@pytest.mark.parametrize("data", [b"", b"not a database", b"SQLite format 3\x00" + b"\x00" * 50])
def test_what_is_not_a_sqlite_database_is_refused(data: bytes) -> None:
    with pytest.raises(ImportRefused) as err:
        imported("langgraph", data)
    assert err.value.code == "history_invalid"


def test_a_database_without_the_saver_s_tables_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE checkpoints (id INTEGER)")
        conn.commit()
    with pytest.raises(ImportRefused):
        imported("langgraph", path.read_bytes())


def test_the_command_writes_one_journal_per_thread_into_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def build(saver: SqliteSaver, graph: Callable[..., Any]) -> None:
        graph().invoke({"x": 1, "note": ""}, cfg("one"))
        graph(stop_before=["c"]).invoke({"x": 1, "note": ""}, cfg("two"))

    src = tmp_path / "db.sqlite"
    src.write_bytes(database(tmp_path, build))
    out = tmp_path / "journals"
    out.mkdir()
    code, stdout, err = run_import(capsys, str(src), "--from", "langgraph", "--out", str(out), "--json")
    assert (code, err) == (0, "")
    summary = json.loads(stdout)
    assert [r["run"] for r in summary["runs"]] == ["langgraph-one", "langgraph-two"]
    assert sorted(p.name for p in out.iterdir()) == ["langgraph-one.jsonl", "langgraph-two.jsonl"]
    assert [r["out"] for r in summary["runs"]] == [str(out / "langgraph-one.jsonl"), str(out / "langgraph-two.jsonl")]
    assert run_assess(capsys, out / "langgraph-two.jsonl")["turns"][-1]["reason"] == "effect_indeterminate"
    code, _out, err = run_import(capsys, str(src), "--from", "langgraph", "--out", str(tmp_path / "nofolder"))
    assert code == 2 and err.count("\n") == 1
