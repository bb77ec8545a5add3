"""A small agent loop audited by LoopX: a read, an idempotent write and an unsafe send, each journaled
before it runs, and a recovery that asks the gate after a crash.

    LOOPX_TOKEN=lxr_... python agent_loop.py --url http://127.0.0.1:8000 --run demo-1 \\
        --journal demo-1.jsonl --ledger world.jsonl --inbox inbox.txt [--crash-at POINT]

The world is a file (``--ledger``): one JSON line per effect a receiver carried out. The draft store is
idempotent (it keeps one draft per key), the mailer is not (every send is a line). ``--crash-at`` kills
this process with SIGKILL at one of CRASH_POINTS, the way a host losing power would.

On every start the loop claims again the turns of records the server lacks, ships its local journal (what
the server has not acknowledged), then asks the gate about every turn it has not finished:

- ``proceed``: claim the turn, open a recovery audit, journal the operator's finding about an unsafe send
  as its readback (``happened``: it was sent; ``not_happened``: send again), run only what the journal
  says is missing, report each action, close the audit;
- ``hold``: stop, print why and exit 3 (an unsafe send without a readback waits for an operator's
  evidence: only a person who looked at the mailer can say whether it went out);
- ``done``: nothing to do.

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

from loopx_client import DEFAULT_PHASES, Claim, Gate, Journal, RecoveryAudit

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


# --- the journal, as this loop reads it back -----------------------------------------------------------


def progress(journal: Journal) -> tuple[dict[str, list[str]], set[str]]:
    """(turn -> committed phases, terminal turns) of the journal (this loop never forks: branch 0)."""
    committed: dict[str, list[str]] = {}
    terminal: set[str] = set()
    for entry in journal.entries:
        record = json.loads(entry.line)
        if entry.kind == "turn_planned":
            committed.setdefault(record["turn"], [])
        elif entry.kind == "phase_committed":
            committed.setdefault(record["turn"], []).append(record["phase"])
        elif entry.kind == "turn_terminal":
            terminal.add(record["turn"])
    return committed, terminal


class Agent:
    def __init__(self, journal: Journal, gate: Gate, world: World, worker: str, crash_at: str | None) -> None:
        self.journal = journal
        self.gate = gate
        self.world = world
        self.worker = worker
        self.crash_at = crash_at
        self.run = journal.run
        self.claims: dict[str, Claim] = {}
        self.audits: dict[str, RecoveryAudit] = {}
        self.reported: set[tuple[str, str, str]] = set()

    def ship(self) -> None:
        self.gate.ship(self.journal)

    def report(self, turn: str, kind: str, target: str) -> None:
        """Tell the turn's open recovery audit (if any) what was done, once, when the gate planned it."""
        audit = self.audits.get(turn)
        if audit is None or (turn, kind, target) in self.reported:
            return
        if any(a["kind"] == kind and a["target"] == target for a in audit.planned):
            self.gate.report(audit, kind, target)
            self.reported.add((turn, kind, target))

    # -- recovery: the gate first ---------------------------------------------------------------------
    def recover(self) -> dict[str, str]:
        """Ask the gate about every unfinished turn; claim and open a recovery where it says proceed.
        Returns the turns it holds, with the reason."""
        held: dict[str, str] = {}
        committed, terminal = progress(self.journal)
        for turn in committed:
            if turn in terminal:
                continue
            decision = self.gate.decision(self.run, turn, expect=self.journal.high_water())
            if decision.state == "done":
                continue
            if decision.state == "hold":
                held[turn] = decision.reason or decision.decision
                continue
            claim = self.gate.claim(self.run, turn, self.worker)  # a renewal when reclaimed already
            self.claims[turn] = claim
            self.audits[turn] = self.gate.open_recovery(claim)
            # An unsafe send without a readback got past the gate only with an operator's finding: it
            # becomes the send's readback, saying where it came from.
            for spec in _steps(turn):
                if spec.effect_class != "unsafe" or not self.journal.dispatched(turn, spec.intent):
                    continue
                if self.journal.readback(turn, spec.intent) not in (None, "unknown"):
                    continue
                seen = decision.intent(spec.intent) or {}
                if seen.get("resolution") == "settled":
                    self.journal.observe(turn, spec.intent, "succeeded", source="operator_evidence")
                elif seen.get("resolution") == "replay":
                    self.journal.observe(turn, spec.intent, "failed", source="operator_evidence")
                else:
                    held[turn] = "effect_indeterminate"
            self.ship()
        return held

    # -- the work: a pure function of the journal ------------------------------------------------------
    def work(self) -> None:
        for spec in WORKLOAD:
            committed, terminal = progress(self.journal)
            if spec.turn in terminal:
                continue
            if spec.turn not in committed:
                self.journal.plan(spec.turn, spec.lineage)
                crash_here(f"{spec.turn}-planned", self.crash_at)
                self.ship()
                crash_here(f"{spec.turn}-shipped", self.crash_at)
            if spec.turn not in self.claims:
                self.claims[spec.turn] = self.gate.claim(self.run, spec.turn, self.worker)
            done = committed.get(spec.turn, [])
            for phase in DEFAULT_PHASES:
                if phase in done:
                    continue
                for step in spec.work.get(phase, ()):
                    self.effect(spec.turn, step)
                self.journal.commit(spec.turn, phase)
                self.ship()
                self.report(spec.turn, "phase", phase)
                crash_here(f"{spec.turn}-{phase}-committed", self.crash_at)
            crash_here(f"{spec.turn}-before-terminal", self.crash_at)
            self.journal.terminal(spec.turn, "completed")
            self.ship()
            self.report(spec.turn, "terminal", "turn_terminal")
            audit = self.audits.pop(spec.turn, None)
            if audit is not None:
                self.gate.close_recovery(audit, note="recovered by the example loop")
            self.gate.release(self.claims.pop(spec.turn))

    def effect(self, turn: str, step: Step) -> None:
        if self.journal.readback(turn, step.intent) == "succeeded":
            return  # done before the crash (or settled by the operator's finding)
        key = f"{self.run}/{turn}/{step.intent}" if step.key else None
        name = f"{turn}/{step.intent}"
        with self.journal.effect(turn, step.intent, step.effect_class, idempotency_key=key):  # type: ignore[arg-type]
            crash_here(f"{turn}-{step.intent}-dispatched", self.crash_at)
            if step.effect_class == "safe":
                self.world.read()
            elif step.effect_class == "idempotent":
                assert key is not None
                self.world.store(name, key, "draft text")
            else:
                self.world.send(name, "reply text")
            crash_here(
                f"{turn}-{step.intent}-{'sent' if step.effect_class == 'unsafe' else 'written'}", self.crash_at
            )
        self.ship()
        self.report(turn, "intent", step.intent)

    def run_to_end(self) -> int:
        # A restart first takes back its claims on the turns it has records for that the server lacks (the
        # same worker id gets the same token while the lease holds), so that they ship with their tokens.
        self.claims.update(self.gate.reclaim(self.journal, self.worker))
        self.ship()
        held = self.recover()
        if held:
            # While a person decides, nobody holds the turn: an operator's "it did not happen" is refused
            # while a worker's lease holds (that worker could be sending the effect right now).
            for turn in held:
                claim = self.claims.pop(turn, None)
                if claim is not None:
                    self.gate.release(claim)
            print(json.dumps({"held": held}, sort_keys=True))
            return EXIT_HELD
        self.work()
        print(json.dumps({"done": [t.turn for t in WORKLOAD]}))
        return EXIT_DONE


def _steps(turn: str) -> list[Step]:
    return [step for spec in WORKLOAD if spec.turn == turn for steps in spec.work.values() for step in steps]


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
