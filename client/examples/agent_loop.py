"""A small agent loop audited by LoopX: a read, an idempotent write and an unsafe send, each journaled
before it runs, and a recovery that asks the gate after a crash.

    LOOPX_TOKEN=lxr_... python agent_loop.py --url http://127.0.0.1:8000 --run demo-1 \\
        --journal demo-1.jsonl --ledger world.jsonl --inbox inbox.txt [--crash-at POINT]

The world is a file (``--ledger``): one JSON line per effect a receiver carried out. The draft store is
idempotent (it keeps one draft per key), the mailer is not (every send is a line). ``--crash-at`` kills
this process with SIGKILL at one of CRASH_POINTS, the way a host losing power would.

Each turn runs in a turn session (``Gate.turn``), which on every start claims back the turns of records the
server lacks, ships the local journal, and asks the gate before anything of the turn runs:

- ``proceed``: the session claims the turn, keeps its lease, journals an operator's finding about an
  unsafe send as its readback (``happened``: it was sent; ``not_happened``: send again), opens a recovery
  audit when the turn had started before, and the loop runs only what the journal says is missing;
- ``hold`` (``TurnHeld``): stop, print why and exit 3 (an unsafe send without a readback waits for an
  operator's evidence: only a person who looked at the mailer can say whether it went out);
- ``done``: nothing to do.

The unsafe send runs only after the server acknowledged its dispatch under the turn's fencing token: a
worker stalled past its lease and taken over is refused (``Fenced``) before it could send a second time.

Exit 0 when every turn is complete.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopx_client import DEFAULT_PHASES, Gate, Journal, TurnHeld, TurnSession

EXIT_DONE = 0
EXIT_HELD = 3

CRASH_POINTS = (
    "t1-planned",  # the plan is durable locally, never shipped
    "t1-shipped",  # the plan is on the server, the turn not yet claimed
    "t1-read-dispatched",  # inside the read, before it reads
    "t1-draft-dispatched",  # the idempotent write journaled, not sent
    "t1-draft-written",  # the write done, its readback not journaled
    "t1-reply-dispatched",  # the unsafe send journaled, not sent
    "t1-reply-sent",  # the send done, its readback not journaled
    "t1-dispatch-committed",
    "t1-before-terminal",
    "t2-archive-written",
)


@dataclass(frozen=True)
class Step:
    intent: str
    effect_class: str  # safe / idempotent / unsafe
    key: bool = False  # an idempotency key (the run, the turn and the intent)


@dataclass(frozen=True)
class TurnSpec:
    turn: str
    lineage: str
    work: dict[str, tuple[Step, ...]]


WORKLOAD = (
    TurnSpec(
        "t1",
        "inbox-reply",
        {
            "dispatch": (
                Step("read", "safe"),
                Step("draft", "idempotent", key=True),
                Step("reply", "unsafe"),
            )
        },
    ),
    TurnSpec("t2", "inbox-archive", {"execute": (Step("archive", "idempotent", key=True),)}),
)


def crash_here(point: str, crash_at: str | None) -> None:
    if point == crash_at:
        os.kill(os.getpid(), signal.SIGKILL)


# --- the world: receivers the agent's effects reach ----------------------------------------------------


class World:
    """The receivers, writing the effect ledger (one JSON line per effect carried out, fsynced)."""

    def __init__(self, ledger: Path, inbox: Path) -> None:
        self.ledger = ledger
        self.inbox = inbox

    def _entries(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]

    def _append(self, entry: dict[str, Any]) -> None:
        with open(self.ledger, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read(self) -> str:  # safe: reads only
        return self.inbox.read_text(encoding="utf-8") if self.inbox.exists() else ""

    def store(self, effect: str, key: str, text: str) -> None:  # idempotent: one entry per key
        if not any(e.get("key") == key for e in self._entries()):
            self._append({"effect": effect, "key": key, "chars": len(text)})

    def send(self, effect: str, text: str) -> None:  # unsafe: every call is a send
        self._append({"effect": effect, "chars": len(text)})


# --- the agent ---------------------------------------------------------------------------------------------


class Agent:
    def __init__(self, journal: Journal, gate: Gate, world: World, worker: str, crash_at: str | None) -> None:
        self.journal = journal
        self.gate = gate
        self.world = world
        self.worker = worker
        self.crash_at = crash_at
        self.run = journal.run

    def run_to_end(self) -> int:
        for spec in WORKLOAD:
            if spec.turn not in self.journal.planned():  # what a session does itself; here to crash in between
                self.journal.plan(spec.turn, spec.lineage)
                crash_here(f"{spec.turn}-planned", self.crash_at)
                self.gate.ship(self.journal)
                crash_here(f"{spec.turn}-shipped", self.crash_at)
            try:
                with self.gate.turn(self.journal, spec.turn, lineage=spec.lineage, worker_id=self.worker) as t:
                    self.work(t, spec)
            except TurnHeld as held:
                print(json.dumps({"held": {spec.turn: held.decision.reason or held.decision.decision}}))
                return EXIT_HELD
        print(json.dumps({"done": [t.turn for t in WORKLOAD]}))
        return EXIT_DONE

    def work(self, t: TurnSession, spec: TurnSpec) -> None:
        """The turn's work: a pure function of the journal (the session skips what is done)."""
        for phase in DEFAULT_PHASES:
            for step in spec.work.get(phase, ()):
                self.effect(t, step)
            if phase not in t.committed():
                t.commit(phase)
                self.gate.ship(self.journal)
                crash_here(f"{spec.turn}-{phase}-committed", self.crash_at)
        crash_here(f"{spec.turn}-before-terminal", self.crash_at)
        t.complete()

    def effect(self, t: TurnSession, step: Step) -> None:
        turn = t.turn
        key = f"{self.run}/{turn}/{step.intent}" if step.key else None
        name = f"{turn}/{step.intent}"

        def body() -> None:
            crash_here(f"{turn}-{step.intent}-dispatched", self.crash_at)
            if step.effect_class == "safe":
                self.world.read()
            elif step.effect_class == "idempotent":
                assert key is not None
                self.world.store(name, key, "draft text")
            else:
                self.world.send(name, "reply text")
            crash_here(f"{turn}-{step.intent}-{'sent' if step.effect_class == 'unsafe' else 'written'}", self.crash_at)

        t.call(step.intent, step.effect_class, body, key=key)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the LoopX server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--run", required=True)
    parser.add_argument("--journal", required=True, type=Path)
    parser.add_argument("--ledger", required=True, type=Path, help="the world's effect ledger (JSONL)")
    parser.add_argument("--inbox", type=Path, default=Path("inbox.txt"))
    parser.add_argument("--worker", default="example-agent", help="a stable id: a restart takes its lease back")
    parser.add_argument("--crash-at", choices=CRASH_POINTS, default=None)
    args = parser.parse_args(argv)
    token = os.environ.get("LOOPX_TOKEN")
    if not token:
        parser.error("set LOOPX_TOKEN to a runtime API token (never on the command line)")
    with Journal(args.journal, run=args.run) as journal:
        agent = Agent(journal, Gate(args.url, token), World(args.ledger, args.inbox), args.worker, args.crash_at)
        return agent.run_to_end()


if __name__ == "__main__":
    sys.exit(main())
