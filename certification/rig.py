"""The rig: SIGKILL the reference runtime at every transition of the compound workload, and the service
at its own kill points, restart what died, let recovery run (playing the operator where a turn needs one)
and check the joint recovery properties.

Per seed: one point of the crash matrix (``seed % len(matrix)``, so every ``len(matrix)`` consecutive seeds
cover every point): a transition of the fresh workload, or, over HTTP, the web killed mid-batch, the worker
killed mid-assessment, a turn taken over from a dead worker, or a worker stalled (SIGSTOP) past its lease at
a dispatch while another takes its turn over, then continued. Odd seeds upgrade the runtime v1->v2
between crash and restart; about half the seeds are killed again inside the recovery pass itself (gate,
claim, the operator's finding journaled, the first resumed records). Every stage is checked, and the end
state jointly:

- legal state after every crash and every restart (no violation at all, so no half fork and no gap;
  every turn resumable, complete, or blocked with a reason an operator can act on);
- exactly one row per intended effect in the external ledger (effects before the fork included);
- rebuild from every checkpoint == fold from lsn 0, byte for byte (v1-era checkpoints with v2 above);
- every intent resolved by its class; the unsafe intent of the discarded branch stays on it
  (``live: false``, indeterminate unless an operator found it happened) and is not on the live timeline;
- recovery run again changes nothing (journal, ledger, assessment);
- every seed converges to the end state of the crash-free run;
- the journal only grows: every record seen at any stage, the discarded suffix included, is still there
  byte-identical;
- over HTTP: the service settles (the worker assessed the final prefix; the stored decisions are the
  engine's), the armed kill fired, a dead worker's late write was refused by the fence, and a stalled
  worker, continued, ended fenced or refused by its own lease check, never with a second effect.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import canonical_bytes, digest, fold_state, rebuild_state
from engine.types import Assessment
from kernel.failpoints import arm_file

from .http import HttpGateway
from .ledger import Ledger
from .operator import BulkAnswer, ConsoleOperator, Refused
from .runtime import (
    EXIT_BLOCKED,
    EXIT_DONE,
    EXIT_FENCE_BREACHED,
    EXIT_FENCED,
    EXIT_LEASE_REFUSED,
    INTENDED_EFFECTS,
    derive,
)
from .server import CHAOS_LEASE_SECONDS, OPERATOR, LiveService
from .store import FileGateway, Gateway, assessment_of

# The number of transitions of the crash-free workload. The rig refuses to run when the workload has
# drifted from it: a new transition must be added here deliberately, with its crash point.
EXPECTED_TRANSITIONS = 54
# The service's own kill points, placed at transitions of the workload (``service_points``): the web killed
# in the middle of the batch of the first append of each kind, the worker killed in the middle of an
# assessment at three places, and a worker taking each turn over from a dead one whose late write the fence
# must refuse. Pinned like the transitions: a new kill point is added here deliberately.
WEB_POINT = "records_ingest.before_commit"
WORKER_POINT = "assess_run.before_assess"
WEB_KINDS = (
    "append:turn_planned",
    "append:phase_committed",
    "append:intent_dispatched",
    "append:effect_observed",
    "append:fork",
    "append:checkpoint",
    "append:turn_terminal",
)
EXPECTED_SERVICE_POINTS = 13  # 7 web, 3 worker, 3 takeovers (one per turn)
# A worker stalled (SIGSTOP) past its lease at the dispatch of every effect that is not safe (3 unsafe, 3
# idempotent: the flaky write's two attempts and the last turn's write), in two variants: before the service
# acknowledged the dispatch ("a") and after, before the effect ("b"). Pinned like the kill points.
EXPECTED_STALL_POINTS = 12
STALL_VARIANTS = ("a", "b")
# The kinds of transition every full sample must have crashed at (fresh run and recovery pass).
REQUIRED_KINDS = frozenset(
    {
        "append:turn_planned",
        "append:phase_committed",
        "append:intent_dispatched",
        "append:effect_observed",
        "append:turn_terminal",
        "append:fork",
        "append:checkpoint",
        "effect:safe",
        "effect:idempotent",
        "effect:unsafe",
    }
)
RECOVERY_KINDS = frozenset({"recovery:gate", "recovery:claim", "recovery:operator-readback"})
SERVICE_KINDS = frozenset({"web", "worker", "takeover", "stall"})
PROJECT_ROOT = Path(__file__).resolve().parents[1]
MAX_RESTARTS = 8
FAILURE_COLUMNS = ("unrecoverable", "double_effects", "refold_mismatches", "recovery_idempotence", "other")


@dataclass(frozen=True)
class Point:
    """One crash point of the matrix. ``kind``: ``runtime`` (the runtime SIGKILLed after transition ``at``),
    ``web`` (the web killed in the middle of transition ``at``'s batch), ``worker`` (the worker killed in the
    middle of the assessment after transition ``at``) or ``takeover`` (the runtime killed after transition
    ``at``'s claim and the next transition; another worker takes the turn over and the dead one's late write
    comes in) or ``stall`` (the runtime stopped at the dispatch that is transition ``at``, ``variant`` "a"
    before the service acknowledged it, "b" after, until another worker has taken the turn over; ``effect``
    is the dispatch's effect class). Every service point also kills the runtime (``crash_at``), so that
    recovery runs after it; a stalled runtime is not killed but continued."""

    kind: str
    at: int
    label: str
    variant: str = ""
    effect: str = ""

    @property
    def crash_at(self) -> int:
        if self.kind == "stall":
            return 0
        return self.at + 1 if self.kind in ("web", "takeover") else self.at

    @property
    def stall_ends(self) -> int:
        """How a stalled worker must end: refused by the fence (its record, or the readback after an
        idempotent effect the key made harmless), or by its own lease check before an unsafe effect."""
        return EXIT_LEASE_REFUSED if (self.variant, self.effect) == ("b", "unsafe") else EXIT_FENCED


def service_points(kinds: tuple[str, ...]) -> tuple[Point, ...]:
    """The service's kill points, placed at transitions of the crash-free workload ``kinds``."""
    first = {k: kinds.index(k) + 1 for k in WEB_KINDS}
    web = [Point("web", first[k], f"web mid-batch, {k}") for k in WEB_KINDS]
    last_checkpoint = len(kinds) - kinds[::-1].index("append:checkpoint")
    worker = [
        Point("worker", at, f"worker mid-assessment, after {kinds[at - 1]}")
        for at in (first["append:intent_dispatched"], first["append:fork"], last_checkpoint)
    ]
    claims = [i + 1 for i, k in enumerate(kinds) if k == "claim"]
    takeover = [Point("takeover", at, f"takeover of turn {n + 1}") for n, at in enumerate(claims)]
    return (*web, *worker, *takeover)


def stall_points(kinds: tuple[str, ...]) -> tuple[Point, ...]:
    """The stalls, placed at every dispatch of the crash-free workload whose effect is not safe."""
    dispatches = [
        (i + 1, kinds[i + 1].removeprefix("effect:"))
        for i, kind in enumerate(kinds[:-1])
        if kind == "append:intent_dispatched" and kinds[i + 1] in ("effect:unsafe", "effect:idempotent")
    ]
    return tuple(
        Point("stall", at, f"stall ({variant}) at the {effect} dispatch {at}", variant, effect)
        for at, effect in dispatches
        for variant in STALL_VARIANTS
    )


def crash_matrix(kinds: tuple[str, ...], *, service: bool) -> tuple[Point, ...]:
    runtime = tuple(Point("runtime", i + 1, kind) for i, kind in enumerate(kinds))
    return runtime + ((*service_points(kinds), *stall_points(kinds)) if service else ())


@dataclass(frozen=True)
class SeedPlan:
    seed: int
    point: Point
    upgrade: bool
    v_first: int
    v_after: int
    recovery_crash_at: int  # 0: recovery is not crashed
    bulk: str  # the operator's first move on a held run: "" (none), "approve" or "block", in bulk

    @property
    def crash_at(self) -> int:
        return self.point.crash_at

    @classmethod
    def of(cls, seed: int, points: tuple[Point, ...] | int = EXPECTED_TRANSITIONS) -> SeedPlan:
        if isinstance(points, int):
            points = tuple(Point("runtime", i + 1, "?") for i in range(points))
        rng = random.Random(seed)
        upgrade = seed % 2 == 1
        v_first = 1 if upgrade else rng.choice((1, 2))
        recovery_crash_at = rng.randint(1, 5) if rng.random() < 0.5 else 0
        bulk = rng.choice(("", "approve", "block"))
        point = points[seed % len(points)]
        return cls(seed, point, upgrade, v_first, 2 if upgrade else v_first, recovery_crash_at, bulk)


@dataclass
class SeedResult:
    plan: SeedPlan
    crash_kind: str = "?"
    recovery_crash_kind: str | None = None
    approvals: int = 0
    v1_checkpoint_with_v2_above: bool = False
    service_kills: int = 0  # the armed kill of the service fired
    stale_writes_refused: int = 0
    bulk_left_alone: int = 0  # turns a bulk approval left alone (an effect unconfirmed)
    bulk_blocked: int = 0
    stall_outcome: str | None = None  # how the stalled worker ended: "fenced" or "lease-refused"
    stalled_seconds: float = 0.0
    lease_refusals: int = 0  # an unstalled worker stopped by its lease check (then restarted)
    # The seed's service kill was never reached: its worker stopped on its lease first (another seed's kill
    # held the service down longer than the lease), so the batch the kill waited for was never sent.
    kills_preempted: int = 0
    failures: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, column: str, message: str) -> None:
        self.failures.setdefault(column, []).append(message)

    @property
    def ok(self) -> bool:
        return not self.failures


# --- running the child ---------------------------------------------------------------------------------


class SeedDir:
    def __init__(
        self, root: Path, seed: int, *, naive: bool = False, server: LiveService | None = None,
        lease_check: bool = True,
    ) -> None:
        self.server = server
        self.lease_check = lease_check
        self.root = root / f"seed-{seed}"
        if self.root.exists():
            shutil.rmtree(self.root)  # a rerun into the same workdir starts from nothing
        self.root.mkdir(parents=True)
        self.naive = naive
        self.store = self.root / "store"
        self.ledger_path = self.root / "ledger.db"
        # One server holds every seed's run: the id carries the seed (g: the crash-free golden runs).
        self.run = f"chaos-{seed}" if seed >= 0 else f"chaos-g{-seed}"
        self.seed = seed
        self.launches = 0

    def gateway(self) -> Gateway:
        if self.server is not None:
            return HttpGateway(self.server.base_url, self.server.token, self.run)
        return FileGateway(self.store, self.run)

    def claims(self, worker: str) -> Path:
        return self.root / f"claims-{worker}.jsonl"

    def launch(
        self, *, crash_at: int, version: int, worker: str = "runtime", zombie_of: str | None = None,
        arm: tuple[int, str, str] | None = None,
    ) -> tuple[int, str, str]:
        """Run the runtime as a child process; returns (returncode, stdout, last trace kind). ``arm``:
        (after transition, role, failpoint) of the service to arm for this run."""
        trace = self.root / f"trace-{self.launches}"
        self.launches += 1
        proc = subprocess.run(
            self._argv(trace, crash_at, version, worker, zombie_of, arm),
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=180, check=False, env=self._child_env(),
        )
        kinds = trace.read_text().split("\n")[:-1] if trace.exists() else []
        last = kinds[-1].split(" ", 1)[1] if kinds else "start"
        if proc.returncode not in (EXIT_DONE, EXIT_BLOCKED, EXIT_FENCE_BREACHED, EXIT_LEASE_REFUSED, -9):
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            return proc.returncode, tail[0], last
        return proc.returncode, proc.stdout, last

    def start_stalled(self, point: Point, version: int) -> Stalled | None:
        """Start the fresh runtime and wait until it has stopped itself at the stall point; None when it
        ended without stopping there."""
        trace = self.root / f"trace-{self.launches}"
        self.launches += 1
        argv = self._argv(trace, 0, version, "runtime", None, None)
        argv += ["--stall-at", str(point.at), "--stall-variant", point.variant]
        out = open(self.root / f"stalled-{self.launches - 1}.out", "w+")  # noqa: SIM115  Stalled closes it
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, env=self._child_env())
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if _stopped(proc.pid):
                return Stalled(proc, out, trace, time.monotonic())
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        out.close()
        return None

    def _argv(
        self, trace: Path, crash_at: int, version: int, worker: str, zombie_of: str | None,
        arm: tuple[int, str, str] | None,
    ) -> list[str]:
        extra = ["--claims", str(self.claims(worker)), "--worker", worker]
        if zombie_of is not None:
            extra += ["--zombie-of", str(self.claims(zombie_of))]
        if arm is not None and self.server is not None:
            after, role, point = arm
            if after == 0:
                self.server.arm(role, point, self.run)  # before the first transition: armed from the start
            else:
                target = self.server.arm_dirs[role] / arm_file(point, self.run)
                extra += ["--arm-after", str(after), "--arm-file", str(target)]
        return [
            sys.executable, "-m", "certification.runtime",
            "--dir", str(self.store), "--ledger", str(self.ledger_path), "--run", self.run,
            "--seed", str(self.seed), "--crash-at", str(crash_at), "--version", str(version),
            "--trace", str(trace), *(["--naive"] if self.naive else []),
            *([] if self.lease_check else ["--no-lease-check"]),
            *(["--store", "http"] if self.server else []), *extra,
        ]

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.server is not None:
            env["LOOPX_CHAOS_URL"] = self.server.base_url
            env["LOOPX_CHAOS_TOKEN"] = self.server.token
            env["LOOPX_CHAOS_LEASE_SECONDS"] = str(CHAOS_LEASE_SECONDS)
        return env

    def transitions(self, launch: int) -> list[str]:
        trace = self.root / f"trace-{launch}"
        return [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]


def _stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP): its state in /proc is ``T``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


@dataclass
class Stalled:
    """A runtime stopped at its stall point, until ``resume``."""

    proc: subprocess.Popen[bytes]
    out: Any
    trace: Path
    since: float

    def resume(self) -> tuple[int, str, list[str], float]:
        """SIGCONT; returns (returncode, output, what it did after it was continued, seconds stopped)."""
        stopped = time.monotonic() - self.since
        self.proc.send_signal(signal.SIGCONT)
        try:
            rc = self.proc.wait(timeout=180)
        finally:
            self.close()
        self.out.seek(0)
        output = self.out.read()
        self.out.close()
        kinds = [line.split(" ", 1)[1] for line in self.trace.read_text().splitlines()]
        after = kinds[kinds.index("stall:continued") + 1:] if "stall:continued" in kinds else kinds
        return rc, output, after, stopped

    def close(self) -> None:
        """Never leave a stopped process behind (the seed failed while it was stalled)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


# --- the checks ----------------------------------------------------------------------------------------


def discarded_suffix(lines: list[bytes]) -> dict[tuple[int, int], bytes]:
    """The stored records every fork discarded (the parent's own records after ``from_lsn``)."""
    records = [json.loads(line) for line in lines]
    cut = {(r["branch"], r["from_lsn"]) for r in records if r["kind"] == "fork"}
    out: dict[tuple[int, int], bytes] = {}
    for line, r in zip(lines, records, strict=True):
        if any(r["branch"] == b and r["lsn"] > j for b, j in cut):
            out[(r["branch"], r["lsn"])] = line
    return out


def check_legal(
    gw: Gateway, result: SeedResult, stage: str, *, final: bool = False, assessment: Assessment | None = None
) -> None:
    """A state recovery can act on: no violation, every turn resumable, done, or operator-actionable."""
    assessment = assessment or assessment_of(gw)
    for v in assessment.violations:
        result.fail("unrecoverable", f"{stage}: violation {v.code} at {v.branch}:{v.lsn} ({v.detail})")
    for turn in assessment.turns:
        decision = turn.decision.value
        if final and decision != "complete":
            result.fail("unrecoverable", f"{stage}: turn {turn.turn} ends {decision} ({turn.reason})")
        elif decision == "blocked" and turn.reason != "effect_indeterminate":
            result.fail("unrecoverable", f"{stage}: turn {turn.turn} blocked by {turn.reason}")
        elif decision == "discarded":
            result.fail("unrecoverable", f"{stage}: turn {turn.turn} was discarded by the rewind")


def play_operator(sd: SeedDir, result: SeedResult, operator: ConsoleOperator | None = None) -> None:
    """The operator at the console: for every blocked live intent, ``turn_approve`` with evidence = the
    ledger's answer. Over HTTP the operator is signed in to the console, and on some seeds first tries a
    bulk decision over the run's held turns (``SeedPlan.bulk``): a bulk approval must leave every turn with
    an unconfirmed effect alone (``evidence_required``); a bulk block holds them, and the approval with
    evidence then lifts that block."""
    gw = sd.gateway()
    ledger = Ledger(sd.ledger_path)
    acted = 0
    try:
        held = [t for t in assessment_of(gw).turns if t.decision.value == "blocked"]
        if operator is not None and held and result.plan.bulk:
            _bulk(operator, sd, result)
        for turn in held:
            evidence = {
                i.intent: "happened" if ledger.happened(run=sd.run, turn=turn.turn, intent=i.intent) else "not_happened"
                for i in turn.intents
                if i.live and i.resolution == "indeterminate"
            }
            if not evidence:
                continue
            reason = f"external ledger readback, seed {sd.seed}"
            try:
                if operator is not None:
                    operator.approve(run=sd.run, turn=turn.turn, reason=reason, evidence=evidence)
                else:
                    gw.approve(turn=turn.turn, actor="chaos-operator", reason=reason, evidence=evidence)
            except (RuntimeError, Refused) as refused:
                # The operator cannot act: the turn is stuck, which is exactly an unrecoverable state.
                result.fail("unrecoverable", f"{turn.turn}: the operator's approval was refused: {refused}")
                return
            acted += len(evidence)
    finally:
        ledger.close()
    if not acted:
        result.fail("unrecoverable", "blocked, and no intent an operator could give evidence for")
    result.approvals += acted


def _bulk(operator: ConsoleOperator, sd: SeedDir, result: SeedResult) -> None:
    action = result.plan.bulk
    try:
        answer: BulkAnswer = operator.bulk(run=sd.run, action=action, reason=f"bulk {action}, seed {sd.seed}")
    except Refused as refused:
        result.fail("other", f"the bulk {action} was refused as a whole: {refused}")
        return
    if action == "approve":
        if answer.done:
            result.fail("other", f"a bulk approval lifted {answer.done}, whose effects nobody confirmed")
        wrong = {t: code for t, code in answer.left.items() if code != "evidence_required"}
        if wrong:
            result.fail("other", f"a bulk approval left turns alone for another reason: {wrong}")
        result.bulk_left_alone += len(answer.left)
    else:
        result.bulk_blocked += len(answer.done)


def check_refold(lines: list[bytes], result: SeedResult) -> None:
    records = [json.loads(line) for line in lines]
    last_lsn: dict[int, int] = {}
    for r in records:
        last_lsn[r["branch"]] = r["lsn"]
    for cp in (r for r in records if r["kind"] == "checkpoint"):
        branch, covers = cp["branch"], cp["covers_lsn"]
        where = f"checkpoint {branch}:{cp['lsn']}"
        state = cp["state"]
        if digest(state) != cp["state_digest"] or digest(fold_state(lines, branch, covers)) != cp["state_digest"]:
            result.fail("refold_mismatches", f"{where}: state digest differs from the fold through {covers}")
        above = [ln for ln, r in zip(lines, records, strict=True) if r["branch"] == branch and r["lsn"] > covers]
        rebuilt = canonical_bytes(rebuild_state(state, above))
        from_zero = canonical_bytes(fold_state(lines, branch, last_lsn[branch]))
        if rebuilt != from_zero:
            result.fail("refold_mismatches", f"{where}: rebuild from the checkpoint != fold from lsn 0")
        versions_above = {json.loads(ln)["v"] for ln in above}
        if cp["v"] == 1 and 2 in versions_above:
            result.v1_checkpoint_with_v2_above = True


_CLASS_RESOLUTIONS = {"safe": {"settled", "replay"}, "idempotent": {"settled", "reissue"}, "unsafe": {"settled"}}


def check_intents(gw: Gateway, lines: list[bytes], result: SeedResult, assessment: Assessment | None = None) -> None:
    assessment = assessment or assessment_of(gw, lines)
    st = derive(lines)
    live_t2 = {r.get("intent") for r in st.timeline if r.get("turn") == "t2"}
    operator_happened = {
        (r["turn"], r["intent"])
        for r in st.records
        if r["kind"] == "effect_observed" and r.get("source") == "operator_evidence" and r["outcome"] == "succeeded"
    }
    for turn in assessment.turns:
        for intent in turn.intents:
            name = f"{turn.turn}/{intent.intent}"
            if (turn.turn, intent.intent) == ("t2", "u2"):
                # Dispatched on branch 0, then rewound: owned by branch 0, never on the live timeline.
                expected = "settled" if ("t2", "u2") in operator_happened else "indeterminate"
                if intent.branch != 0 or intent.live or intent.resolution != expected:
                    result.fail(
                        "other",
                        f"{name}: branch {intent.branch} live={intent.live} {intent.resolution}, expected "
                        f"branch 0 live=False {expected}",
                    )
                if "u2" in live_t2:
                    result.fail("other", f"{name}: the discarded intent is on the live timeline")
            elif not intent.live or intent.resolution not in _CLASS_RESOLUTIONS[intent.effect_class]:
                result.fail("other", f"{name}: {intent.effect_class} ends {intent.resolution} (live={intent.live})")


def end_state(gw: Gateway, ledger_path: Path, run: str, assessment: Assessment | None = None) -> dict[str, Any]:
    """What must converge: every turn's decision and progress, and what the world saw."""
    ledger = Ledger(ledger_path)
    try:
        effects = ledger.effect_counts(run)
    finally:
        ledger.close()
    turns = [
        {"turn": t.turn, "decision": t.decision.value, "phases": list(t.completed_phases), "terminal": t.terminal}
        for t in (assessment or assessment_of(gw)).turns
    ]
    return {"turns": turns, "effects": effects}


def journal_bytes(gw: Gateway) -> bytes:
    """The stored journal, as the store gives it back."""
    return b"".join(line + b"\n" for line in gw.lines())


def snapshot(sd: SeedDir) -> tuple[bytes, list[tuple[object, ...]], bytes, bytes]:
    gw = sd.gateway()
    ledger = Ledger(sd.ledger_path)
    try:
        rows = ledger.snapshot()
    finally:
        ledger.close()
    lines = gw.lines()
    evidence = json.dumps([list(vars(r).values()) for r in gw.evidence_rows()]).encode()
    return (
        b"".join(line + b"\n" for line in lines),
        rows,
        evidence,
        canonical_bytes(assessment_of(gw, lines).to_dict()),
    )


# --- one seed ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Golden:
    transitions: int
    kinds: tuple[str, ...]
    end: dict[str, Any]
    points: tuple[Point, ...]


def golden_run(workdir: Path, server: LiveService | None = None) -> Golden:
    """The crash-free workload, at both schema versions: the transition count, the end state, the matrix."""
    ends = []
    kinds: tuple[str, ...] = ()
    for version in (1, 2):
        sd = SeedDir(workdir, -version, server=server)
        rc, out, _ = sd.launch(crash_at=0, version=version)
        if rc != EXIT_DONE:
            raise RuntimeError(f"the crash-free workload (v{version}) did not complete: rc={rc} {out}")
        kinds = tuple(sd.transitions(0))
        if len(kinds) != EXPECTED_TRANSITIONS:
            raise RuntimeError(
                f"the workload has {len(kinds)} transitions at v{version}, the rig expects {EXPECTED_TRANSITIONS}:"
                " update EXPECTED_TRANSITIONS together with the workload"
            )
        missing = REQUIRED_KINDS - set(kinds)
        if missing:
            raise RuntimeError(f"the workload lacks transitions of kinds {sorted(missing)}")
        ends.append(end_state(sd.gateway(), sd.ledger_path, sd.run))
    if ends[0] != ends[1]:
        raise RuntimeError("the crash-free workload ends differently at v1 and v2")
    if ends[1]["effects"] != INTENDED_EFFECTS:
        raise RuntimeError(f"the crash-free workload's ledger is {ends[1]['effects']}, not {INTENDED_EFFECTS}")
    if len(service_points(kinds)) != EXPECTED_SERVICE_POINTS:
        raise RuntimeError(
            f"the workload places {len(service_points(kinds))} service kill points, the rig expects"
            f" {EXPECTED_SERVICE_POINTS}: update EXPECTED_SERVICE_POINTS together with the workload"
        )
    if len(stall_points(kinds)) != EXPECTED_STALL_POINTS:
        raise RuntimeError(
            f"the workload places {len(stall_points(kinds))} stall points, the rig expects"
            f" {EXPECTED_STALL_POINTS}: update EXPECTED_STALL_POINTS together with the workload"
        )
    return Golden(EXPECTED_TRANSITIONS, kinds, ends[1], crash_matrix(kinds, service=server is not None))


def check_settled(
    server: LiveService, run: str, assessment: Assessment, result: SeedResult, *, patience: float = 30.0
) -> None:
    """The service at rest agrees with the journal: the worker (killed or not) has assessed the final
    prefix, and the run's stored decisions are the engine's (``assessment``, the rig's own of the final
    journal). A lost assessment is a failure, not a wait."""
    expected: dict[str, int] = {}
    for turn in assessment.turns:
        expected[turn.decision.value] = expected.get(turn.decision.value, 0) + 1
    deadline = time.monotonic() + patience
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"{server.base_url}/api/v1/runs/{urllib.parse.quote(run, safe='')}")
        request.add_header("Authorization", f"Bearer {server.token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = json.loads(response.read())
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)  # a web restart in progress
            continue
        if body.get("assessed_seq") == body.get("last_seq") and body.get("decisions") == expected:
            return
        time.sleep(0.2)
    result.fail(
        "other",
        f"the service never settled: assessed {body.get('assessed_seq')} of {body.get('last_seq')},"
        f" decisions {body.get('decisions')} (the journal says {expected}); {server.assessment_trace(run)}",
    )


def _traced(sd: SeedDir, kind: str) -> int:
    return sum(sd.transitions(n).count(kind) for n in range(sd.launches) if (sd.root / f"trace-{n}").exists())


def run_seed(
    seed: int,
    workdir: Path,
    golden: Golden,
    *,
    naive: bool = False,
    server: LiveService | None = None,
    operator: ConsoleOperator | None = None,
    lease_check: bool = True,
) -> SeedResult:
    plan = SeedPlan.of(seed, golden.points)
    sd = SeedDir(workdir, seed, naive=naive, server=server, lease_check=lease_check)
    with ExitStack() as stack:
        return _run_seed(sd, plan, golden, server, operator, stack)


def _run_seed(
    sd: SeedDir,
    plan: SeedPlan,
    golden: Golden,
    server: LiveService | None,
    operator: ConsoleOperator | None,
    stack: ExitStack,
) -> SeedResult:
    point = plan.point
    result = SeedResult(plan)
    gw = sd.gateway()
    seen: dict[tuple[int, int], bytes] = {}
    previous = b""

    def stage_checks(stage: str) -> None:
        nonlocal previous
        lines = gw.lines()
        data = b"".join(line + b"\n" for line in lines)
        if not data.startswith(previous):
            result.fail("unrecoverable", f"{stage}: the journal was rewritten, not appended to")
        previous = data
        for key, line in discarded_suffix(lines).items():
            if seen.setdefault(key, line) != line:
                result.fail("unrecoverable", f"{stage}: discarded record {key} changed")
        check_legal(gw, result, stage, assessment=assessment_of(gw, lines))

    arm: tuple[int, str, str] | None = None
    if point.kind == "web":
        arm = (point.at - 1, "web", WEB_POINT)  # armed before the batch of transition `at`
    elif point.kind == "worker":
        arm = (point.at - 1, "worker", WORKER_POINT)  # the assessment of transition `at`'s batch, or a later one
    stalled: Stalled | None = None
    if point.kind == "stall":
        stalled = sd.start_stalled(point, plan.v_first)
        if stalled is None:
            result.fail("unrecoverable", f"the worker never stopped at its stall point {point.at}")
            return result
        stack.callback(stalled.close)
        result.crash_kind = f"stall:{point.variant}"
        stage_checks(f"while the worker is stalled at {point.at} ({point.variant})")
    else:
        rc, out, result.crash_kind = sd.launch(crash_at=plan.crash_at, version=plan.v_first, arm=arm)
        if rc == EXIT_LEASE_REFUSED:
            # The worker's lease ran out under it before its crash point (the service, killed by this seed or
            # another, was down longer than the lease): it stopped before an effect, safely. That stop is
            # its crash; recovery takes it from there.
            result.lease_refusals += 1
            result.crash_kind = "lease-refused"
        elif rc != -9:
            result.fail("unrecoverable", f"crash point {plan.crash_at} was not reached: rc={rc} {out.strip()}")
            return result
        stage_checks(f"after crash at {plan.crash_at} ({result.crash_kind})")

    # A takeover: the restarted runtime is another worker, and the dead one's late write comes in after it.
    # A stall: another worker takes the turn over while the stalled one is stopped, which then writes itself.
    worker, zombie = {"takeover": ("runtime-b", "runtime"), "stall": ("runtime-b", None)}.get(point.kind,
                                                                                             ("runtime", None))
    # The recovery crash stays armed until it fires: a restart that stops at the gate (blocked, operator
    # needed) has not run recovery yet, and the next one will.
    armed = plan.recovery_crash_at
    for attempt in range(MAX_RESTARTS):
        rc, out, last = sd.launch(crash_at=armed, version=plan.v_after, worker=worker, zombie_of=zombie)
        if rc == -9:
            armed = 0
            result.recovery_crash_kind = last
            stage_checks(f"after recovery crash at {plan.recovery_crash_at} ({last})")
            continue
        if rc == EXIT_BLOCKED:
            stage_checks(f"blocked on restart {attempt + 1}: {out.strip()}")
            play_operator(sd, result, operator)
            continue
        if rc == EXIT_FENCE_BREACHED:
            result.fail("other", f"the dead worker's late write was stored: {out.strip()}")
            return result
        if rc == EXIT_LEASE_REFUSED:
            # The worker's lease ran out under it (a long outage of the service): it stopped before an
            # effect, safely; recovery takes it from there, as after a crash.
            result.lease_refusals += 1
            stage_checks(f"lease refused on restart {attempt + 1}")
            continue
        if rc != EXIT_DONE:
            result.fail("unrecoverable", f"restart {attempt + 1} failed: rc={rc} {out.strip()}")
            return result
        break
    else:
        result.fail("unrecoverable", f"no convergence after {MAX_RESTARTS} restarts")
        return result

    _end_checks(sd, gw, plan, golden, server, result, stage_checks, stalled=stalled, worker=worker, zombie=zombie)
    return result


def _end_checks(
    sd: SeedDir,
    gw: Gateway,
    plan: SeedPlan,
    golden: Golden,
    server: LiveService | None,
    result: SeedResult,
    stage_checks: Callable[[str], None],
    *,
    stalled: Stalled | None,
    worker: str,
    zombie: str | None,
) -> None:
    """Once recovery converged: the journal is legal and sound, each effect happened once, the end state is
    the crash-free run's, the service settled, and a second recovery pass changes nothing."""
    if stalled is not None:
        check_stalled(stalled, result)
    stage_checks("after recovery")
    lines = gw.lines()
    assessment = assessment_of(gw, lines)
    check_legal(gw, result, "end", final=True, assessment=assessment)
    ledger = Ledger(sd.ledger_path)
    try:
        effects = ledger.effect_counts(sd.run)
    finally:
        ledger.close()
    for name, count in effects.items():
        if count > 1:
            result.fail("double_effects", f"{name}: {count} rows in the external ledger")
    for name in INTENDED_EFFECTS:
        if name not in effects:
            result.fail("other", f"{name}: intended effect missing from the external ledger")
    check_refold(lines, result)
    check_intents(gw, lines, result, assessment)
    end = end_state(gw, sd.ledger_path, sd.run, assessment)
    if end != golden.end:
        result.fail("other", f"end state differs from the crash-free run: {end}")
    if server is not None:
        # Settled first: an armed worker kill may fire only in the assessment of the final prefix, once the
        # worker is back from another seed's kill.
        check_settled(server, sd.run, assessment, result)
        check_service_point(server, sd, result)

    # Recovery again: a crash loop's next pass must find nothing to do and change nothing.
    before = snapshot(sd)
    rc, out, _ = sd.launch(crash_at=0, version=plan.v_after, worker=worker, zombie_of=zombie)
    if rc != EXIT_DONE or snapshot(sd) != before:
        result.fail("recovery_idempotence", f"a second recovery pass changed the state (rc={rc} {out.strip()})")


def check_stalled(stalled: Stalled, result: SeedResult) -> None:
    """The stalled worker, continued once another worker has taken its turn over and finished the run,
    must stop: refused by the fence or by its own lease check, never with a second effect, and with no
    record of its stored after it lost the lease."""
    point = result.plan.point
    rc, output, after, result.stalled_seconds = stalled.resume()
    result.stall_outcome = {EXIT_FENCED: "fenced", EXIT_LEASE_REFUSED: "lease-refused"}.get(rc)
    tail = (output.strip().splitlines() or ["(no output)"])[-1]
    if result.stalled_seconds <= CHAOS_LEASE_SECONDS:
        result.fail("other", f"the worker was stalled {result.stalled_seconds:.1f} s, not past its lease")
    if "effect:unsafe" in after:
        result.fail("double_effects", f"the stalled worker sent an unsafe effect after it lost its lease: {after}")
    stored = [kind for kind in after if kind.startswith("append:")]
    if stored:
        result.fail("other", f"the stalled worker's records were stored after it lost its lease: {stored}")
    if rc != point.stall_ends:
        expected = "fenced" if point.stall_ends == EXIT_FENCED else "lease-refused"
        result.fail("other", f"the stalled worker ended rc={rc}, not {expected} ({tail}; after continuing: {after})")
    elif rc == EXIT_FENCED and "recovery:fenced" not in after:
        result.fail("other", f"the stalled worker was not refused by the fence: {after}")


def check_service_point(server: LiveService, sd: SeedDir, result: SeedResult) -> None:
    """The seed's service kill really happened where it was placed (or its late write was refused)."""
    point = result.plan.point
    if point.kind in ("web", "worker"):
        failpoint = WEB_POINT if point.kind == "web" else WORKER_POINT
        if server.fired(point.kind, failpoint, sd.run):
            result.service_kills += 1
        elif result.crash_kind == "lease-refused":
            server.disarm(point.kind, failpoint, sd.run)
            result.kills_preempted += 1
        else:
            server.disarm(point.kind, failpoint, sd.run)
            result.fail("other", f"the {point.kind}'s kill at {failpoint} was armed and never reached")
    elif point.kind == "takeover":
        result.stale_writes_refused = _traced(sd, "recovery:stale-write-refused")
        if not result.stale_writes_refused:
            result.fail("other", "the turn was taken over, and no late write of the dead worker was tried")


# --- many seeds ----------------------------------------------------------------------------------------


@dataclass
class Summary:
    results: list[SeedResult]
    transitions: int
    points: tuple[Point, ...] = ()
    seconds: float = 0.0
    restarts: dict[str, int] = field(default_factory=dict)
    store: str = "file"

    def column(self, name: str) -> int:
        return sum(1 for r in self.results if name in r.failures)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def covered_points(self) -> set[int]:
        """The runtime crash points covered (transitions of the workload)."""
        return {r.plan.crash_at for r in self.results if r.plan.point.kind == "runtime"}

    def covered_matrix(self) -> set[Point]:
        return {r.plan.point for r in self.results}

    def covered_kinds(self) -> set[str]:
        kinds = {r.crash_kind for r in self.results}
        kinds |= {f"in-recovery:{r.recovery_crash_kind}" for r in self.results if r.recovery_crash_kind}
        return kinds

    def table(self) -> str:
        recovery_kinds = sorted(k for k in self.covered_kinds() if k.startswith("in-recovery:"))
        by_kind = {kind: sum(1 for r in self.results if r.plan.point.kind == kind) for kind in ("web", "worker",
                                                                                            "takeover", "stall")}
        stall_ends = {end: sum(1 for r in self.results if r.stall_outcome == end) for end in ("fenced",
                                                                                           "lease-refused")}
        matrix = self.points or tuple(Point("runtime", i + 1, "?") for i in range(self.transitions))
        rows = [
            ("store", self.store),
            ("seeds", str(len(self.results))),
            ("crash points covered", f"{len(self.covered_matrix() & set(matrix))}/{len(matrix)}"),
            ("runtime crash points", f"{len(self.covered_points())}/{self.transitions}"),
            ("crash point kinds", str(len({r.crash_kind for r in self.results}))),
            ("crashes inside recovery", f"{sum(1 for r in self.results if r.recovery_crash_kind)} "
             f"({', '.join(k.removeprefix('in-recovery:') for k in recovery_kinds)})"),
            ("seeds with v1->v2 upgrade", str(sum(1 for r in self.results if r.plan.upgrade))),
            ("v1 checkpoint, v2 above", str(sum(1 for r in self.results if r.v1_checkpoint_with_v2_above))),
            ("operator approvals", str(sum(r.approvals for r in self.results))),
        ]
        if self.store == "http":
            rows += [
                ("web killed mid-batch", f"{by_kind['web']} seeds, {self.restarts.get('web', 0)} restarts"),
                ("worker killed mid-assessment",
                 f"{by_kind['worker']} seeds, {self.restarts.get('worker', 0)} restarts"),
                ("turns taken over", f"{by_kind['takeover']} seeds, "
                 f"{sum(r.stale_writes_refused for r in self.results)} late writes fenced"),
                ("workers stalled past the lease", f"{by_kind['stall']} seeds, {stall_ends['fenced']} fenced, "
                 f"{stall_ends['lease-refused']} refused by their lease"),
                ("lease refusals, unstalled", str(sum(r.lease_refusals for r in self.results))),
                ("service kills pre-empted", str(sum(r.kills_preempted for r in self.results))),
                ("bulk decisions", f"{sum(r.bulk_left_alone for r in self.results)} left alone by an approval, "
                 f"{sum(r.bulk_blocked for r in self.results)} blocked"),
            ]
        rows += [
            ("unrecoverable", str(self.column("unrecoverable"))),
            ("double effects", str(self.column("double_effects"))),
            ("re-fold mismatches", str(self.column("refold_mismatches"))),
            ("recovery-idempotence failures", str(self.column("recovery_idempotence"))),
            ("other invariant failures", str(self.column("other"))),
            ("took", f"{self.seconds:.0f} s"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def describe(result: SeedResult) -> str:
    p = result.plan
    where = p.point.label if p.point.kind != "runtime" else f"crash at {p.crash_at} ({result.crash_kind})"
    if p.point.kind == "stall":
        where += f", ended {result.stall_outcome} after {result.stalled_seconds:.1f} s"
    elif p.point.kind != "runtime":
        where += f", runtime crash at {p.crash_at} ({result.crash_kind})"
    head = (
        f"seed {p.seed}: {where} v{p.v_first}->v{p.v_after}"
        f" recovery crash {p.recovery_crash_at or '-'}"
        + (f" ({result.recovery_crash_kind})" if result.recovery_crash_kind else "")
        + (f" bulk {p.bulk}" if p.bulk and result.approvals else "")
    )
    if result.ok:
        return f"{head}: ok"
    details = "; ".join(f"{col}: {' | '.join(msgs)}" for col, msgs in result.failures.items())
    return f"{head}: FAIL {details}"


def run_seeds(
    seeds: Iterable[int],
    *,
    jobs: int = 2,
    workdir: Path | None = None,
    echo: Callable[[str], None] | None = None,
    naive: bool = False,
    store: str = "file",
    lease_check: bool = True,
) -> Summary:
    """``store``: ``http`` (the certification: a live service on PostgreSQL and Redis with a real worker, the
    runtime talking to it through the runtime client, the service killed too) or ``file`` (the adapter,
    for quick checks of the workload and the rig itself)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loopx-chaos-") as tmp, ExitStack() as stack:
        root = workdir or Path(tmp)
        server = stack.enter_context(LiveService(root / "service")) if store == "http" else None
        golden = golden_run(root, server)
        local = threading.local()

        def operator() -> ConsoleOperator | None:
            if server is None:
                return None
            if not hasattr(local, "operator"):  # one signed-in session per rig thread
                local.operator = ConsoleOperator(server.base_url, OPERATOR, server.operator_password)
            found: ConsoleOperator = local.operator
            return found

        def one(seed: int) -> SeedResult:
            try:
                return run_seed(
                    seed, root, golden, naive=naive, server=server, operator=operator(), lease_check=lease_check
                )
            except Exception as error:  # the seed fails, with what raised; the other seeds still run
                failed = SeedResult(SeedPlan.of(seed, golden.points))
                failed.fail("other", f"the rig raised {error!r}")
                return failed

        results: list[SeedResult] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for result in pool.map(one, list(seeds)):
                results.append(result)
                if echo is not None:
                    echo(describe(result))
        restarts = dict(server.restarts) if server is not None else {}
        return Summary(results, golden.transitions, golden.points, time.monotonic() - started, restarts, store)


def failed_seeds(summary: Summary) -> list[int]:
    return [r.plan.seed for r in summary.results if not r.ok]
