"""The reference runtime of the composition gate: a compound workload through the real engine.

Run as a child process (``python -m certification.runtime --dir D --run R --crash-at N --version 1|2``)
so that a SIGKILL is a real process death. The workload (WORKLOAD below) is one run with three turns:

- ``t1``: a safe read, an idempotent write whose receiver refuses the first attempt (a retry with the
  same key), an unsafe charge; then a checkpoint (digest of the engine's fold).
- ``t2``: an unsafe send whose reply is lost (readback ``unknown``), then a rewind (a fork back to before
  the send) and, on the new branch, a different unsafe send; the first send stays on the discarded
  suffix as evidence.
- ``t3``: an idempotent write; then a second checkpoint, on the new branch.

The runtime keeps no memory across processes: on every start it reads the stored journal, asks the
recovery gate about every open turn, claims it, journals any operator finding as a readback, and then
runs only what the journal says is missing (`next_action` is a pure function of the journal). Every
record append, every ledger effect and every recovery step (gate, claim) is a *transition*; the
failpoint SIGKILLs the process right after transition N (N=0: never).

A worker keeps the leases of its claims (a local monotonic deadline, renewed as it works) and starts an
unsafe effect only while its lease outlasts the effect (docs/chaos.md, "Leases"). ``--stall-at N`` stops
the process (SIGSTOP) at the dispatch that is transition N, for the rig's stall seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from loopx_client.errors import Conflict, Fenced

from engine import DEFAULT_PHASES, canonical_bytes, digest, fold_state
from engine.writer import JournalWriter, fixed_clock

from .http import HttpGateway, gateway_from_env, stale_write
from .ledger import Ledger
from .store import EvidenceRow, FileGateway, Gateway, cited_evidence, latest_evidence

EXIT_DONE = 0
EXIT_BLOCKED = 3
EXIT_FENCE_BREACHED = 5  # a dead worker's late write was stored: the fence did not hold
EXIT_FENCED = 6  # the service refused this worker's records: another worker took the turn over
EXIT_LEASE_REFUSED = 7  # the lease had too little time left for an unsafe effect: the worker stopped before it

# The longest the workload's effect may take once started (the ledger's receiver: one local SQLite write,
# generous under load), and the margin for a clock that runs slower than the server's. An unsafe effect
# starts only while at least both remain of the worker's own lease.
EFFECT_MAX_SECONDS = 0.5
LEASE_MARGIN_SECONDS = 0.25
# A renewal that answered too late to leave that much is tried again (same token: the lease never lapsed).
LEASE_RENEWALS = 3


@dataclass(frozen=True)
class IntentSpec:
    intent: str
    effect_class: str
    key: str | None = None
    flaky: bool = False  # the receiver refuses the first attempt: the workload's retry
    lost_reply: bool = False  # the runtime never sees the answer: readback `unknown`
    before_fork: bool | None = None  # None: either epoch; True: only before the rewind; False: after


@dataclass(frozen=True)
class TurnSpec:
    turn: str
    lineage: str
    work: dict[str, tuple[IntentSpec, ...]] = field(default_factory=dict)
    # The rewind: after the phase's work, before committing it, fork back to this turn's committed phase.
    rewind_before: str | None = None
    rewind_to: str | None = None


@dataclass(frozen=True)
class CheckpointSpec:
    ordinal: int  # the n-th checkpoint of the live timeline


WORKLOAD: tuple[TurnSpec | CheckpointSpec, ...] = (
    TurnSpec(
        "t1",
        "job-1",
        work={
            "dispatch": (
                IntentSpec("s1", "safe"),
                IntentSpec("i1", "idempotent", key="t1-i1", flaky=True),
                IntentSpec("u1", "unsafe"),
            )
        },
    ),
    CheckpointSpec(1),
    TurnSpec(
        "t2",
        "job-2",
        work={
            "dispatch": (
                IntentSpec("u2", "unsafe", lost_reply=True, before_fork=True),
                IntentSpec("u3", "unsafe", before_fork=False),
            )
        },
        rewind_before="dispatch",
        rewind_to="envelope",
    ),
    TurnSpec("t3", "job-3", work={"execute": (IntentSpec("i3", "idempotent", key="t3-i3"),)}),
    CheckpointSpec(2),
)

# Every intended effect of the workload, once each: what the external ledger must hold at the end.
INTENDED_EFFECTS = {
    f"{t.turn}/{i.intent}": 1
    for t in WORKLOAD
    if isinstance(t, TurnSpec)
    for items in t.work.values()
    for i in items
    if i.effect_class != "safe"
}


# --- the journal, as the runtime needs to see it ------------------------------------------------------


@dataclass
class Dispatch:
    branch: int
    lsn: int
    effect_class: str
    outcome: str | None = None  # merged readback: a later `unknown` never downgrades a definitive one


@dataclass
class JournalState:
    records: list[dict[str, Any]]
    live: int
    highest: int
    timeline: list[dict[str, Any]]
    planned: set[str]
    committed: dict[str, list[str]]
    terminal: dict[str, str]
    world: dict[tuple[str, str], list[Dispatch]]
    live_keys: set[tuple[int, int]]
    checkpoints: int

    def live_dispatches(self, turn: str, intent: str) -> list[Dispatch]:
        return [d for d in self.world.get((turn, intent), []) if (d.branch, d.lsn) in self.live_keys]


def timeline_of(records: list[dict[str, Any]], branch: int) -> list[dict[str, Any]]:
    """The records of ``branch``'s timeline: its inherited prefix (recursively), then its own."""
    forks = {r["new_branch"]: r for r in records if r["kind"] == "fork"}
    own = [r for r in records if r["branch"] == branch]
    if branch not in forks:
        return own
    fork = forks[branch]
    parent = timeline_of(records, fork["branch"])
    inherited = [r for r in parent if r["branch"] != fork["branch"] or r["lsn"] <= fork["from_lsn"]]
    return inherited + own


def derive(lines: list[bytes]) -> JournalState:
    records = [json.loads(line) for line in lines]
    highest = max([0] + [r["new_branch"] for r in records if r["kind"] == "fork"])
    timeline = timeline_of(records, highest)
    planned: set[str] = set()
    committed: dict[str, list[str]] = {}
    terminal: dict[str, str] = {}
    checkpoints = 0
    for r in timeline:
        kind = r["kind"]
        if kind == "turn_planned":
            planned.add(r["turn"])
            committed.setdefault(r["turn"], [])
        elif kind == "phase_committed":
            committed.setdefault(r["turn"], []).append(r["phase"])
        elif kind == "turn_terminal":
            terminal[r["turn"]] = r["status"]
        elif kind == "checkpoint":
            checkpoints += 1
    world: dict[tuple[str, str], list[Dispatch]] = {}
    for r in records:  # effects are facts about the world: every branch, file order
        if r["kind"] == "intent_dispatched":
            cls = r.get("effect_class") or (
                "unsafe" if r.get("unsafe") else "idempotent" if r.get("idempotency_key") else "safe"
            )
            world.setdefault((r["turn"], r["intent"]), []).append(Dispatch(r["branch"], r["lsn"], cls))
        elif r["kind"] == "effect_observed":
            latest = world[(r["turn"], r["intent"])][-1]
            if latest.outcome in (None, "unknown"):
                latest.outcome = r["outcome"]
    return JournalState(
        records=records,
        live=highest,
        highest=highest,
        timeline=timeline,
        planned=planned,
        committed=committed,
        terminal=terminal,
        world=world,
        live_keys={(r["branch"], r["lsn"]) for r in timeline},
        checkpoints=checkpoints,
    )


# --- what to do next: a pure function of the journal ----------------------------------------------------


@dataclass(frozen=True)
class Action:
    kind: str  # plan / commit / terminal / dispatch / fork / checkpoint
    turn: str | None = None
    phase: str | None = None
    intent: IntentSpec | None = None
    lineage: str | None = None
    from_lsn: int | None = None


def _intent_action(st: JournalState, turn: str, spec: IntentSpec, naive: bool) -> Action | None:
    dispatches = st.world.get((turn, spec.intent), [])
    if not dispatches:
        return Action("dispatch", turn=turn, intent=spec)
    latest = dispatches[-1]
    if latest.outcome == "succeeded":
        return None
    if latest.outcome == "failed":
        return Action("dispatch", turn=turn, intent=spec)  # a retry after `failed` is legal for every class
    if spec.effect_class in ("safe", "idempotent"):
        return Action("dispatch", turn=turn, intent=spec)  # replay / reissue with the same key
    if latest.outcome == "unknown" and spec.lost_reply:
        return None  # the workload's lost reply: what follows is the rewind, not a guess
    if naive:
        return Action("dispatch", turn=turn, intent=spec)  # the bug the rig exists to catch
    # An unsafe dispatch without a definitive readback must have been stopped by the gate; going on would
    # be the double effect recovery exists to prevent. Fail closed.
    raise RuntimeError(f"unsafe intent {turn}/{spec.intent} has no readback past the gate")


def next_action(st: JournalState, *, naive: bool = False) -> Action | None:
    for step in WORKLOAD:
        if isinstance(step, CheckpointSpec):
            if st.checkpoints < step.ordinal:
                return Action("checkpoint")
            continue
        turn = step.turn
        if turn not in st.planned:
            return Action("plan", turn=turn, lineage=step.lineage)
        if turn in st.terminal:
            continue
        done = st.committed.get(turn, [])
        for phase in DEFAULT_PHASES:
            if phase in done:
                continue
            for spec in step.work.get(phase, ()):
                if spec.before_fork is True and st.highest > 0:
                    continue
                if spec.before_fork is False and st.highest == 0:
                    continue
                action = _intent_action(st, turn, spec, naive)
                if action is not None:
                    return action
            if step.rewind_before == phase and st.highest == 0:
                target = next(
                    r["lsn"]
                    for r in st.records
                    if r["branch"] == 0
                    and r["kind"] == "phase_committed"
                    and r["turn"] == turn
                    and r["phase"] == step.rewind_to
                )
                return Action("fork", turn=turn, from_lsn=target)
            return Action("commit", turn=turn, phase=phase)
        return Action("terminal", turn=turn)
    return None


# --- the process ---------------------------------------------------------------------------------------


class Failpoint:
    """Counts transitions; SIGKILLs this process right after transition ``crash_at`` (0: never).

    Each transition is written to the trace first, so the rig knows which kind of point it killed at.
    ``arm`` (transition, file): right after that transition, the file is written, which arms a kill in the
    live service (kernel/failpoints.py) for this run: the service then dies at its named point inside the
    next request or assessment of this run, placed by the workload, not by a clock.
    """

    def __init__(self, crash_at: int, trace: Path | None, arm: tuple[int, Path] | None = None) -> None:
        self.crash_at = crash_at
        self.count = 0
        self.arm = arm
        self.trace = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115  open for the process's life

    def __call__(self, kind: str) -> None:
        self.count += 1
        if self.trace is not None:
            self.trace.write(f"{self.count} {kind}\n")
            self.trace.flush()
        if self.arm is not None and self.count == self.arm[0]:
            tmp = self.arm[1].with_name(self.arm[1].name + ".tmp")
            tmp.write_text("kill-group")
            tmp.rename(self.arm[1])
        if self.count == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)


class Stop(Exception):
    """The worker stops here and exits with ``code``: it may no longer act for the turn."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass
class Lease:
    """A claim as this worker knows it: the token, and a local monotonic deadline taken before the claim
    request was sent (the server's lease can only end later than that)."""

    token: int
    deadline: float


def resume_writer(run: str, version: int, lines: list[bytes]) -> JournalWriter:
    """A JournalWriter positioned after the stored records (chains, lsns, live branch)."""
    start = datetime(2026, 1, 1, tzinfo=datetime.now().astimezone().tzinfo)
    if lines:
        last = json.loads(lines[-1])["at"]
        start = datetime.fromisoformat(last.replace("Z", "+00:00")) + timedelta(seconds=1)
    writer = JournalWriter(run, version=version, clock=fixed_clock(start))
    for line in lines:
        record = json.loads(line)
        writer.write_raw(record)
        if record["kind"] == "fork":
            new = record["new_branch"]
            writer.highest = max(writer.highest, new)
            writer.branch = new
            writer.next_lsn[new] = 0
            writer.last_digest[new] = digest(record)
    return writer


class Runtime:
    def __init__(
        self,
        gateway: Gateway,
        ledger: Ledger,
        run: str,
        version: int,
        tick: Failpoint,
        worker: str,
        *,
        naive: bool = False,
        claims: Path | None = None,
        zombie_of: Path | None = None,
        stall: tuple[str, int] | None = None,
        lease_check: bool = True,
    ) -> None:
        # naive: a runtime that skips the gate and simply re-runs what looks unfinished. It exists only so
        # that the rig's tests can show the rig catches it (a double effect); never use it otherwise.
        self.naive = naive
        self.gw = gateway
        self.ledger = ledger
        self.run = run
        self.version = version
        self.tick = tick
        self.worker = worker
        # This worker's own claims (turn, token), kept the way a worker process knows what it holds; the rig
        # hands a dead worker's file to its successor to play that worker's late write (``zombie_of``).
        self.claims = claims
        self.zombie_of = zombie_of
        # stall: (variant, transition): SIGSTOP this process at the dispatch that is transition N, either
        # before its record is acknowledged ("a") or after, before the effect ("b"); the rig continues it.
        self.stall = stall
        # lease_check False: a runtime that trusts a lease it no longer holds. It exists only so that the
        # rig's tests can show the rig catches it (a stalled worker's second effect); never use it otherwise.
        self.lease_check = lease_check
        self.leases: dict[str, Lease] = {}
        self.writer = resume_writer(run, version, gateway.lines())

    def _claim(self, turn: str, label: str) -> int:
        token, waited = self.gw.claim_or_wait(turn, self.worker)
        self._hold(turn, token)
        if self.claims is not None:
            with open(self.claims, "a") as fh:
                fh.write(json.dumps({"turn": turn, "token": token, "worker": self.worker}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        self.tick(label)
        if waited:
            self.tick("recovery:lease-waited")
        self._late_write_of_the_dead(turn, token)
        return token

    def _late_write_of_the_dead(self, turn: str, token: int) -> None:
        """After taking a turn over from a dead worker: that worker, come back from the dead, writes what it
        would have written next, with the token it held. The fence must refuse it and store nothing."""
        if self.zombie_of is None or not self.zombie_of.exists() or not isinstance(self.gw, HttpGateway):
            return
        held = [json.loads(line) for line in self.zombie_of.read_text().splitlines() if line.strip()]
        stale = [c["token"] for c in held if c["turn"] == turn and c["worker"] != self.worker and c["token"] < token]
        if not stale:
            return
        zombie = resume_writer(self.run, self.version, list(self.writer.lines))
        done = derive(zombie.lines).committed.get(turn, [])
        phase = next((p for p in DEFAULT_PHASES if p not in done), None)
        record = zombie.commit(turn, phase) if phase is not None else zombie.terminal(turn, "completed")
        status = stale_write(self.gw.base_url, os.environ["LOOPX_CHAOS_TOKEN"], self.run, canonical_bytes(record),
                             turn, max(stale))
        if status != 409:
            print(json.dumps({"fence_breached": turn, "status": status}))
            sys.stdout.flush()
            os._exit(EXIT_FENCE_BREACHED)
        self.tick("recovery:stale-write-refused")

    def _hold(self, turn: str, token: int) -> None:
        deadline = self.gw.lease_deadline(turn)
        if deadline is not None:  # the file store keeps no leases: its token alone fences
            self.leases[turn] = Lease(token, deadline)

    def _renew(self, turn: str) -> bool:
        """Claim the turn again as its holder. True when the lease was extended; False when it was lost: the
        service refused (another worker holds the turn, or it is finished) or answered with a new token (the
        lease had run out, so another worker may have had the turn in between)."""
        lease = self.leases[turn]
        try:
            token = self.gw.claim(turn, self.worker)
        except Conflict:
            return False
        if token != lease.token:
            return False
        self._hold(turn, token)
        return True

    def _keep_lease(self, turn: str | None) -> None:
        """Before each step of a claimed turn: renew the lease once half of it has gone."""
        if turn is None or turn not in self.leases:
            return
        half = self.gw.lease_seconds(turn) / 2
        if self.leases[turn].deadline - time.monotonic() < half and not self._renew(turn):
            self._refuse_lease(turn, "the lease was lost before the step")

    def _lease_allows_effect(self, turn: str) -> None:
        """Right before an unsafe effect: it starts only while the lease outlasts the effect's longest
        duration plus the margin. The assumption (as for any lease): between this check and the effect
        the worker pauses for less than that margin."""
        lease = self.leases.get(turn)
        if lease is None or not self.lease_check:
            return
        needed = EFFECT_MAX_SECONDS + LEASE_MARGIN_SECONDS
        for renewals in range(LEASE_RENEWALS + 1):
            if self.leases[turn].deadline - time.monotonic() >= needed:
                return
            if renewals == LEASE_RENEWALS or not self._renew(turn):
                break
        self._refuse_lease(turn, "too little of the lease is left for the unsafe effect")

    def _refuse_lease(self, turn: str, detail: str) -> None:
        self.tick("recovery:lease-refused")
        raise Stop(EXIT_LEASE_REFUSED, f"{turn}: {detail}")

    def _stall(self, variant: str, at: int) -> None:
        """Stopped at the dispatch point until the rig continues this process (SIGCONT)."""
        if self.stall != (variant, at):
            return
        self.tick(f"stall:{variant}")
        os.kill(os.getpid(), signal.SIGSTOP)
        self.tick("stall:continued")

    def _store(self, record: dict[str, Any], label: str | None = None) -> None:
        try:
            self.gw.ingest([canonical_bytes(record)])
        except Fenced as fenced:
            self.tick("recovery:fenced")
            raise Stop(EXIT_FENCED, str(fenced)) from fenced
        self.tick(label or f"append:{record['kind']}")

    def recover(self) -> str | None:
        """The gate, before anything resumes. Returns a blocking reason, or None when all may go on."""
        st = derive(self.writer.lines)
        cited = cited_evidence(self.writer.lines)
        order = [s.turn for s in WORKLOAD if isinstance(s, TurnSpec)]
        for turn in sorted(st.planned - set(st.terminal), key=order.index):
            answer = self.gw.decision(turn)
            self.tick("recovery:gate")
            if answer is None:
                return f"{turn}: the gate has no decision"
            if answer.state == "hold" or answer.decision in ("blocked", "discarded"):
                return f"{turn}: {answer.reason or answer.decision}"
            if answer.state == "done":
                continue
            # Every live unsafe dispatch without a definitive readback needs a finding the journal has not
            # absorbed yet. The gate may say `proceed` on an older finding (it names the intent, not the
            # dispatch); going on with it could repeat an effect the world saw, so stop here instead.
            findings = latest_evidence(self.gw.evidence_rows(turn))
            dangling: list[tuple[str, EvidenceRow]] = []
            for (t, intent) in sorted(st.world):
                live = st.live_dispatches(t, intent)
                if t != turn or not live or live[-1].effect_class != "unsafe":
                    continue
                if live[-1].outcome not in (None, "unknown"):
                    continue
                row = findings.get((turn, intent))
                if row is None or row.id in cited:
                    return f"{turn}: effect_indeterminate ({intent} has no finding the journal has not used)"
                dangling.append((intent, row))
            self._claim(turn, "recovery:claim")
            # Journal each finding as the readback it stands for, citing it: from here on the journal, not
            # the evidence table, says what happened to that dispatch.
            for intent, row in dangling:
                outcome = "succeeded" if row.finding == "happened" else "failed"
                record = self.writer.observe(turn, intent, outcome)
                # observe() already appended the record locally; the extra fields must be in the bytes.
                self.writer.lines.pop()
                record["source"] = "operator_evidence"
                record["evidence_id"] = row.id
                self.writer.last_digest[record["branch"]] = digest(record)
                self.writer.lines.append(canonical_bytes(record))
                self._store(record, "recovery:operator-readback")
        return None

    def execute(self, action: Action) -> None:
        w = self.writer
        self._keep_lease(action.turn)
        if action.kind == "plan":
            assert action.turn is not None
            self._store(w.plan(action.turn, action.lineage))
            # A worker claims a turn before working on it: its lease, and the token that fences its writes.
            self._claim(action.turn, "claim")
        elif action.kind == "commit":
            assert action.turn is not None and action.phase is not None
            self._store(w.commit(action.turn, action.phase))
        elif action.kind == "terminal":
            assert action.turn is not None
            self._store(w.terminal(action.turn, "completed"))
        elif action.kind == "fork":
            assert action.from_lsn is not None
            w.fork(action.from_lsn, reason="reply lost: rewind and take another path")
            self._store(json.loads(w.lines[-1]))
        elif action.kind == "checkpoint":
            covers = w.next_lsn[w.branch] - 1
            state = fold_state(list(w.lines), w.branch, covers)
            self._store(w.append("checkpoint", covers_lsn=covers, state_digest=digest(state), state=state))
        elif action.kind == "dispatch":
            spec, turn = action.intent, action.turn
            assert spec is not None and turn is not None
            # Intent first, acknowledged by the service under the turn's token, then the effect (an unsafe one
            # only while the lease holds), then the readback: a crash between them is what the gate sees.
            dispatch = w.dispatch(turn, spec.intent, spec.effect_class, spec.key)
            at = self.tick.count + 1  # the transition the acknowledged dispatch will be
            self._stall("a", at)
            self._store(dispatch)
            self._stall("b", at)
            if spec.effect_class == "unsafe":
                self._lease_allows_effect(turn)
            answer = self.ledger.receive(
                run=self.run, turn=turn, intent=spec.intent, effect_class=spec.effect_class, key=spec.key,
                flaky=spec.flaky,
            )
            self.tick(f"effect:{spec.effect_class}")
            self._store(w.observe(turn, spec.intent, "unknown" if spec.lost_reply else answer))
        else:
            raise ValueError(f"unknown action {action.kind}")

    def run_to_end(self) -> int:
        reason = None if self.naive else self.recover()
        if reason is not None:
            print(json.dumps({"blocked": reason}))
            return EXIT_BLOCKED
        while (action := next_action(derive(self.writer.lines), naive=self.naive)) is not None:
            self.execute(action)
        return EXIT_DONE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m certification.runtime")
    parser.add_argument("--dir", required=True, type=Path, help="the run's store directory")
    parser.add_argument("--ledger", required=True, type=Path, help="the external ledger's SQLite file")
    parser.add_argument("--run", required=True)
    parser.add_argument("--seed", type=int, default=0, help="printed, for the record")
    parser.add_argument("--crash-at", type=int, default=0, help="SIGKILL after this transition (0: never)")
    parser.add_argument("--version", type=int, choices=(1, 2), default=2, help="record schema to write")
    parser.add_argument("--trace", type=Path, default=None)
    parser.add_argument("--worker", default="runtime")
    parser.add_argument(
        "--store", choices=("file", "http"), default="file",
        help="file: the adapter over --dir; http: the live API at $LOOPX_CHAOS_URL with $LOOPX_CHAOS_TOKEN",
    )
    parser.add_argument("--naive", action="store_true", help="skip the gate (only to prove the rig catches it)")
    parser.add_argument("--claims", type=Path, default=None, help="append this worker's claims (turn, token) here")
    parser.add_argument("--zombie-of", type=Path, default=None, help="a dead worker's claims: play its late write")
    parser.add_argument("--arm-after", type=int, default=0, help="after this transition, write --arm-file")
    parser.add_argument("--arm-file", type=Path, default=None, help="the service failpoint to arm (its file)")
    parser.add_argument("--stall-at", type=int, default=0, help="SIGSTOP at the dispatch that is this transition")
    parser.add_argument(
        "--stall-variant", choices=("a", "b"), default="a",
        help="a: before the dispatch is acknowledged; b: after, before the effect",
    )
    parser.add_argument(
        "--no-lease-check", action="store_true", help="trust a lapsed lease (only to prove the rig catches it)"
    )
    args = parser.parse_args(argv)
    print(f"chaos runtime seed={args.seed} run={args.run} crash_at={args.crash_at} v={args.version}", file=sys.stderr)
    ledger = Ledger(args.ledger)
    try:
        gateway: Gateway = gateway_from_env(args.run) if args.store == "http" else FileGateway(args.dir, args.run)
        arm = (args.arm_after, args.arm_file) if args.arm_file is not None else None
        runtime = Runtime(
            gateway, ledger, args.run, args.version, Failpoint(args.crash_at, args.trace, arm),
            # A stable worker id: the service's claim is a lease, and a restarted runtime must be able to
            # take its own turn back at once instead of waiting for the dead incarnation's lease to expire.
            f"{args.worker}:{args.run}",
            naive=args.naive,
            claims=args.claims,
            zombie_of=args.zombie_of,
            stall=(args.stall_variant, args.stall_at) if args.stall_at else None,
            lease_check=not args.no_lease_check,
        )
        try:
            return runtime.run_to_end()
        except Stop as stop:
            print(json.dumps({"stopped": str(stop), "code": stop.code}))
            return stop.code
    finally:
        ledger.close()


if __name__ == "__main__":
    sys.exit(main())
