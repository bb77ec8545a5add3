"""A LangGraph support agent audited by LoopX: a read, a keyed write and an unsafe send, one node each.

    LOOPX_URL=http://127.0.0.1:8000 LOOPX_TOKEN=lxr_... python langgraph_agent.py --db agent.sqlite --thread t1
        [--resume VALUE]

The lines ending in ``# loopx`` are the whole adapter: without them this is the same agent on LangGraph
alone (the project's suite counts them). The model is langchain-core's fake chat model, so nothing goes
to the network. The world is a file (``AGENT_LEDGER``): one JSON line per call a receiver carried out.
``AGENT_CRASH_AT`` (agent, lookup, save, send) kills the process with SIGKILL inside that node, after
its call reached the world. Exit 0: done; 3: the gate holds a step (TurnHeld); 4: the graph is interrupted
(an operator found that the send happened: resume with ``--resume`` and what the send returned).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from loopx_client import Gate, TurnHeld  # loopx
from loopx_client.langgraph import LoopxCheckpointer, effect  # loopx

CRASH_POINTS = ["agent", "lookup", "save", "send"]


def world(what: str, **fields: Any) -> None:
    """A receiver carried the call out; a crash point there dies right after it."""
    with open(os.environ.get("AGENT_LEDGER", "world.jsonl"), "a") as ledger:
        ledger.write(json.dumps({"effect": what, **fields}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    if os.environ.get("AGENT_CRASH_AT") == what:
        os.kill(os.getpid(), signal.SIGKILL)


@tool
@effect("read")  # loopx
def lookup_ticket(ticket_id: str) -> str:
    """Read a ticket."""
    world("lookup", ticket_id=ticket_id)
    return f"ticket {ticket_id}: the customer asks where the refund is"


@tool
@effect("idempotent", key="note/{ticket_id}")  # loopx
def save_note(ticket_id: str, note: str) -> str:
    """Keep one note per ticket (the store keeps the last write of a key)."""
    world("save", key=f"note/{ticket_id}")
    return "saved"


@tool
@effect("unsafe")  # loopx
def send_reply(ticket_id: str, text: str) -> str:
    """Mail the customer (every call is a mail)."""
    world("send", ticket_id=ticket_id)
    return "sent"


PLAN = AIMessage(
    content="",
    tool_calls=[
        {"name": "lookup_ticket", "args": {"ticket_id": "1234"}, "id": "call-lookup"},
        {"name": "save_note", "args": {"ticket_id": "1234", "note": "refund asked"}, "id": "call-save"},
        {"name": "send_reply", "args": {"ticket_id": "1234", "text": "Your refund is on its way."}, "id": "call-send"},
    ],
)


def agent(state: MessagesState) -> dict[str, Any]:
    reply = GenericFakeChatModel(messages=iter([PLAN])).invoke(state["messages"])
    world("agent")
    return {"messages": [reply]}


def node_for(one: BaseTool) -> Any:
    def run(state: MessagesState) -> dict[str, Any]:
        plan = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage) and m.tool_calls)
        call = next(c for c in plan.tool_calls if c["name"] == one.name)
        return {"messages": [one.invoke({**call, "type": "tool_call"})]}

    return run


def build() -> StateGraph[MessagesState]:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    for name, one in (("lookup", lookup_ticket), ("save", save_note), ("send", send_reply)):
        graph.add_node(name, node_for(one))
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "lookup")
    graph.add_edge("lookup", "save")
    graph.add_edge("save", "send")
    graph.add_edge("send", END)
    return graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--resume")
    args = parser.parse_args(argv)
    checkpointer: Any = SqliteSaver(sqlite3.connect(args.db, check_same_thread=False))
    gate = Gate(os.environ["LOOPX_URL"], os.environ["LOOPX_TOKEN"])  # loopx
    checkpointer = LoopxCheckpointer(checkpointer, gate, journal_dir=Path(args.db).parent, worker_id="agent-1")  # loopx
    graph = build().compile(checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": args.thread}}
    started = graph.get_state(config).values
    ask = {"messages": [HumanMessage("Where is my refund? (ticket 1234)")]}
    payload: Any = Command(resume=args.resume) if args.resume else (None if started else ask)
    try:
        result = graph.invoke(payload, config, durability="sync")
    except TurnHeld as held:  # loopx
        print(json.dumps({"held": held.intent, "turn": held.turn, "console": held.console}))  # loopx
        return 3  # loopx
    except GraphRecursionError:
        return 2
    if "__interrupt__" in result:
        print(json.dumps({"interrupt": [i.value for i in result["__interrupt__"]]}))
        return 4
    print(json.dumps({"done": result["messages"][-1].content}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
