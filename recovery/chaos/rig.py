"""The rig: SIGKILL the reference runtime at every transition of the compound workload, restart it, let
recovery run (playing the operator where a turn needs one) and check the joint recovery properties.

Per seed: one crash point of the fresh workload (``seed % transitions + 1``, so every
``transitions`` consecutive seeds cover every point), a v1->v2 runtime upgrade between crash and restart
for odd seeds, and for about half the seeds a second SIGKILL inside the recovery pass itself (gate,
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
  byte-identical.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import canonical_bytes, digest, fold_state, rebuild_state

from .http import HttpGateway
from .ledger import Ledger
from .runtime import EXIT_BLOCKED, EXIT_DONE, INTENDED_EFFECTS, derive
from .server import LiveServer
from .store import FileGateway, Gateway, assessment_of

# The number of transitions of the crash-free workload. The rig refuses to run when the workload has
# drifted from it: a new transition must be added here deliberately, with its crash point.
EXPECTED_TRANSITIONS = 51
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
PROJECT_ROOT = Path(__file__).resolve().parents[2]
MAX_RESTARTS = 8
FAILURE_COLUMNS = ("unrecoverable", "double_effects", "refold_mismatches", "recovery_idempotence", "other")


@dataclass(frozen=True)
class SeedPlan:
    seed: int
    crash_at: int
    upgrade: bool
    v_first: int
    v_after: int
    recovery_crash_at: int  # 0: recovery is not crashed

    @classmethod
    def of(cls, seed: int, transitions: int = EXPECTED_TRANSITIONS) -> SeedPlan:
        rng = random.Random(seed)
        upgrade = seed % 2 == 1
        v_first = 1 if upgrade else rng.choice((1, 2))
        recovery_crash_at = rng.randint(1, 5) if rng.random() < 0.5 else 0
        return cls(seed, seed % transitions + 1, upgrade, v_first, 2 if upgrade else v_first, recovery_crash_at)


@dataclass
class SeedResult:
    plan: SeedPlan
    crash_kind: str = "?"
    recovery_crash_kind: str | None = None
    approvals: int = 0
    v1_checkpoint_with_v2_above: bool = False
    failures: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, column: str, message: str) -> None:
        self.failures.setdefault(column, []).append(message)

    @property
    def ok(self) -> bool:
        return not self.failures


# --- running the child ---------------------------------------------------------------------------------


class SeedDir:
    def __init__(self, root: Path, seed: int, *, naive: bool = False, server: LiveServer | None = None) -> None:
        self.server = server
        self.root = root / f"seed-{seed}"
        if self.root.exists():
            shutil.rmtree(self.root)  # a rerun into the same workdir starts from nothing
        self.naive = naive
        self.store = self.root / "store"
        self.ledger_path = self.root / "ledger.db"
        # One server holds every seed's run: the id carries the seed (g: the crash-free golden runs).
        self.run = f"chaos-{seed}" if seed >= 0 else f"chaos-g{-seed}"
        self.seed = seed
        self.launches = 0

    def gateway(self) -> Gateway:
        if self.server is not None:
            return HttpGateway(self.server.base_url, self.server.token, self.run, operator_env=self.server.env)
        return FileGateway(self.store, self.run)

    def launch(self, *, crash_at: int, version: int) -> tuple[int, str, str]:
        """Run the runtime as a child process; returns (returncode, stdout, last trace kind)."""
        trace = self.root / f"trace-{self.launches}"
        self.launches += 1
        proc = subprocess.run(
            [
                sys.executable, "-m", "recovery.chaos.runtime",
                "--dir", str(self.store), "--ledger", str(self.ledger_path), "--run", self.run,
                "--seed", str(self.seed), "--crash-at", str(crash_at), "--version", str(version),
                "--trace", str(trace), *(["--naive"] if self.naive else []),
                *(["--store", "http"] if self.server else []),
            ],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False, env=self._child_env(),
        )
        kinds = trace.read_text().split("\n")[:-1] if trace.exists() else []
        last = kinds[-1].split(" ", 1)[1] if kinds else "start"
        if proc.returncode not in (EXIT_DONE, EXIT_BLOCKED, -9):
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            return proc.returncode, tail[0], last
        return proc.returncode, proc.stdout, last

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.server is not None:
            env["LOOPX_CHAOS_URL"] = self.server.base_url
            env["LOOPX_CHAOS_TOKEN"] = self.server.token
        return env

    def transitions(self, launch: int) -> list[str]:
        trace = self.root / f"trace-{launch}"
        return [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]


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


def check_legal(gw: Gateway, result: SeedResult, stage: str, *, final: bool = False) -> None:
    """A state recovery can act on: no violation, every turn resumable, done, or operator-actionable."""
    assessment = assessment_of(gw)
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


def play_operator(sd: SeedDir, result: SeedResult) -> None:
    """The console's `turn_approve` with evidence = the ledger's answer, for every blocked live intent."""
    gw = sd.gateway()
    ledger = Ledger(sd.ledger_path)
    acted = 0
    try:
        for turn in assessment_of(gw).turns:
            if turn.decision.value != "blocked":
                continue
            evidence = {
                i.intent: "happened" if ledger.happened(run=sd.run, turn=turn.turn, intent=i.intent) else "not_happened"
                for i in turn.intents
                if i.live and i.resolution == "indeterminate"
            }
            if evidence:
                try:
                    gw.approve(
                        turn=turn.turn, actor="chaos-operator", reason=f"external ledger readback, seed {sd.seed}",
                        evidence=evidence,
                    )
                except RuntimeError as refused:
                    # The operator cannot act: the turn is stuck, which is exactly an unrecoverable state.
                    result.fail("unrecoverable", f"{turn.turn}: the operator's approval was refused: {refused}")
                    return
                acted += len(evidence)
    finally:
        ledger.close()
    if not acted:
        result.fail("unrecoverable", "blocked, and no intent an operator could give evidence for")
    result.approvals += acted


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


def check_intents(gw: Gateway, lines: list[bytes], result: SeedResult) -> None:
    assessment = assessment_of(gw)
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


def end_state(gw: Gateway, ledger_path: Path, run: str) -> dict[str, Any]:
    """What must converge: every turn's decision and progress, and what the world saw."""
    ledger = Ledger(ledger_path)
    try:
        effects = ledger.effect_counts(run)
    finally:
        ledger.close()
    turns = [
        {"turn": t.turn, "decision": t.decision.value, "phases": list(t.completed_phases), "terminal": t.terminal}
        for t in assessment_of(gw).turns
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
    evidence = json.dumps([list(vars(r).values()) for r in gw.evidence_rows()]).encode()
    return (
        journal_bytes(gw),
        rows,
        evidence,
        canonical_bytes(assessment_of(gw).to_dict()),
    )


# --- one seed ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Golden:
    transitions: int
    kinds: tuple[str, ...]
    end: dict[str, Any]


def golden_run(workdir: Path, server: LiveServer | None = None) -> Golden:
    """The crash-free workload, at both schema versions: the transition count and the end state."""
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
    return Golden(EXPECTED_TRANSITIONS, kinds, ends[1])


def run_seed(
    seed: int, workdir: Path, golden: Golden, *, naive: bool = False, server: LiveServer | None = None
) -> SeedResult:
    plan = SeedPlan.of(seed, golden.transitions)
    result = SeedResult(plan)
    sd = SeedDir(workdir, seed, naive=naive, server=server)
    gw = sd.gateway()
    seen: dict[tuple[int, int], bytes] = {}
    previous = b""

    def stage_checks(stage: str) -> None:
        nonlocal previous
        data = journal_bytes(gw)
        if not data.startswith(previous):
            result.fail("unrecoverable", f"{stage}: the journal was rewritten, not appended to")
        previous = data
        lines = gw.lines()
        for key, line in discarded_suffix(lines).items():
            if seen.setdefault(key, line) != line:
                result.fail("unrecoverable", f"{stage}: discarded record {key} changed")
        check_legal(gw, result, stage)

    rc, out, result.crash_kind = sd.launch(crash_at=plan.crash_at, version=plan.v_first)
    if rc != -9:
        result.fail("unrecoverable", f"crash point {plan.crash_at} was not reached: rc={rc} {out.strip()}")
        return result
    stage_checks(f"after crash at {plan.crash_at} ({result.crash_kind})")

    # The recovery crash stays armed until it fires: a restart that stops at the gate (blocked, operator
    # needed) has not run recovery yet, and the next one will.
    armed = plan.recovery_crash_at
    for attempt in range(MAX_RESTARTS):
        rc, out, last = sd.launch(crash_at=armed, version=plan.v_after)
        if rc == -9:
            armed = 0
            result.recovery_crash_kind = last
            stage_checks(f"after recovery crash at {plan.recovery_crash_at} ({last})")
            continue
        if rc == EXIT_BLOCKED:
            stage_checks(f"blocked on restart {attempt + 1}: {out.strip()}")
            play_operator(sd, result)
            continue
        if rc != EXIT_DONE:
            result.fail("unrecoverable", f"restart {attempt + 1} failed: rc={rc} {out.strip()}")
            return result
        break
    else:
        result.fail("unrecoverable", f"no convergence after {MAX_RESTARTS} restarts")
        return result

    stage_checks("after recovery")
    check_legal(gw, result, "end", final=True)
    lines = gw.lines()
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
    check_intents(gw, lines, result)
    end = end_state(gw, sd.ledger_path, sd.run)
    if end != golden.end:
        result.fail("other", f"end state differs from the crash-free run: {end}")

    # Recovery again: a crash loop's next pass must find nothing to do and change nothing.
    before = snapshot(sd)
    rc, out, _ = sd.launch(crash_at=0, version=plan.v_after)
    if rc != EXIT_DONE or snapshot(sd) != before:
        result.fail("recovery_idempotence", f"a second recovery pass changed the state (rc={rc} {out.strip()})")
    return result


# --- many seeds ----------------------------------------------------------------------------------------


@dataclass
class Summary:
    results: list[SeedResult]
    transitions: int

    def column(self, name: str) -> int:
        return sum(1 for r in self.results if name in r.failures)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def covered_points(self) -> set[int]:
        return {r.plan.crash_at for r in self.results}

    def covered_kinds(self) -> set[str]:
        kinds = {r.crash_kind for r in self.results}
        kinds |= {f"in-recovery:{r.recovery_crash_kind}" for r in self.results if r.recovery_crash_kind}
        return kinds

    def table(self) -> str:
        recovery_kinds = sorted(k for k in self.covered_kinds() if k.startswith("in-recovery:"))
        rows = [
            ("seeds", str(len(self.results))),
            ("crash points covered", f"{len(self.covered_points())}/{self.transitions}"),
            ("crash point kinds", str(len({r.crash_kind for r in self.results}))),
            ("crashes inside recovery", f"{sum(1 for r in self.results if r.recovery_crash_kind)} "
             f"({', '.join(k.removeprefix('in-recovery:') for k in recovery_kinds)})"),
            ("seeds with v1->v2 upgrade", str(sum(1 for r in self.results if r.plan.upgrade))),
            ("v1 checkpoint, v2 above", str(sum(1 for r in self.results if r.v1_checkpoint_with_v2_above))),
            ("operator approvals", str(sum(r.approvals for r in self.results))),
            ("unrecoverable", str(self.column("unrecoverable"))),
            ("double effects", str(self.column("double_effects"))),
            ("re-fold mismatches", str(self.column("refold_mismatches"))),
            ("recovery-idempotence failures", str(self.column("recovery_idempotence"))),
            ("other invariant failures", str(self.column("other"))),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def describe(result: SeedResult) -> str:
    p = result.plan
    head = (
        f"seed {p.seed}: crash at {p.crash_at} ({result.crash_kind}) v{p.v_first}->v{p.v_after}"
        f" recovery crash {p.recovery_crash_at or '-'}"
        + (f" ({result.recovery_crash_kind})" if result.recovery_crash_kind else "")
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
) -> Summary:
    """``store``: ``file`` (the adapter, fast) or ``http`` (a live server; the runtime talks HTTP to it)."""
    with tempfile.TemporaryDirectory(prefix="loopx-chaos-") as tmp, ExitStack() as stack:
        root = workdir or Path(tmp)
        server = stack.enter_context(LiveServer(root / "server")) if store == "http" else None
        golden = golden_run(root, server)
        results: list[SeedResult] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for result in pool.map(lambda s: run_seed(s, root, golden, naive=naive, server=server), list(seeds)):
                results.append(result)
                if echo is not None:
                    echo(describe(result))
        return Summary(results, golden.transitions)


def failed_seeds(summary: Summary) -> list[int]:
    return [r.plan.seed for r in summary.results if not r.ok]


