"""A worker of the client README's pattern (a read, a keyed write, an unsafe send in one turn) that stops
itself (SIGSTOP) at a chosen point, the way a GC pause or a slow host stalls a worker, until the test sends
SIGCONT. Run as ``python stall_worker.py URL RUN JOURNAL LEDGER WORKER STOP_AT`` with LOOPX_TOKEN set.

STOP_AT: ``before-write-ahead`` (the send's dispatch is fsynced locally, its ship not yet sent),
``kill-before-write-ahead`` (SIGKILL there instead) or ``none``. The last line of stdout says how the worker
ended, as JSON: ``done``, ``fenced`` (with the turn and both tokens), ``lease`` (a local lease refusal) or
``write_ahead_failed`` (with the cause's class)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from loopx_client import Fenced, Gate, Journal, LeaseError, Shippable, ShipResult, WriteAheadFailed


def world_append(ledger: Path, entry: dict[str, Any]) -> None:
    with open(ledger, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def keyed_store(ledger: Path, effect: str, key: str) -> None:
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    if not any(json.loads(line).get("key") == key for line in lines):
        world_append(ledger, {"effect": effect, "key": key})


def _intent(line: bytes | str) -> Any:
    return json.loads(line).get("intent")


class StallingGate(Gate):
    """Stops (or kills) the process once, just before shipping the dispatch of the unsafe send."""

    stop_at = "none"

    def ship(self, journal: Shippable) -> ShipResult:
        entries = journal.entries
        dispatched = entries and entries[-1].kind == "intent_dispatched"
        if self.stop_at.endswith("before-write-ahead") and dispatched and _intent(entries[-1].line) == "send":
            kill = self.stop_at.startswith("kill")
            self.stop_at = "none"
            print("stopping", flush=True)
            os.kill(os.getpid(), signal.SIGKILL if kill else signal.SIGSTOP)
        return super().ship(journal)


def run_turn(gate: Gate, journal: Journal, run: str, ledger: Path, worker: str) -> None:
    """The README's agent loop, for one turn."""
    with gate.turn(journal, "t1", lineage="ticket-1", worker_id=worker) as t:
        t.commit("plan", "envelope")
        ticket = t.call("read", "safe", lambda: "ticket text")
        t.call("draft", "idempotent", lambda: keyed_store(ledger, "t1/draft", f"{run}/t1/draft"),
               key=f"{run}/t1/draft")
        t.call("send", "unsafe", lambda: world_append(ledger, {"effect": "t1/send", "by": worker,
                                                                "chars": len(ticket or "")}), max_duration=0.5)
        t.complete()


def main() -> int:
    url, run, journal_path, ledger, worker, stop_at = sys.argv[1:7]
    gate = StallingGate(url, os.environ["LOOPX_TOKEN"], backoff=0.05)
    gate.stop_at = stop_at
    with Journal(journal_path, run=run) as journal:
        try:
            run_turn(gate, journal, run, Path(ledger), worker)
        except Fenced as fenced:
            print(json.dumps({"outcome": "fenced", "turn": fenced.turn, "token": fenced.token,
                              "current": fenced.current}))
            return 4
        except LeaseError as refused:
            print(json.dumps({"outcome": "lease", "error": type(refused).__name__}))
            return 5
        except WriteAheadFailed as failed:
            print(json.dumps({"outcome": "write_ahead_failed", "cause": type(failed.cause).__name__}))
            return 6
    print(json.dumps({"outcome": "done"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
