"""Demo data and workloads, written with the engine's JournalWriter so that they are real journals.

``demo_journals()`` is a fixed set of runs that between them reach every decision of the contract
(complete, finalize, resume, blocked for several reasons including ``effect_indeterminate`` and a
run-level violation, discarded), with a fork, a checkpoint, v1 records upgraded to v2 and a secret field.
``manage.py run_all`` seeds them into an empty database through the store's ingest service (in several
batches, so the background queue coalesces); the tests use the same journals, so what a newcomer sees
after ``make run`` is what the tests check. ``workload_lines`` is the small run the benchmarks use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.types import DEFAULT_PHASES
from engine.writer import JournalWriter
from journals.services import records_ingest

PHASES = list(DEFAULT_PHASES)


@dataclass(frozen=True)
class DemoRun:
    run_id: str
    title: str
    lines: list[bytes]
    # turn -> (decision, reason or resume_from) the engine must give; the tests hold the demo to it.
    expect: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def _complete(w: JournalWriter, turn: str, lineage: str, *, intent: str | None = None) -> None:
    """A turn that did everything, with one idempotent effect observed."""
    w.plan(turn, lineage)
    for phase in PHASES:
        w.commit(turn, phase)
        if phase == "dispatch" and intent:
            w.dispatch(turn, intent, "idempotent", key=f"{turn}-{intent}")
        if phase == "readback" and intent:
            w.observe(turn, intent, "succeeded")
    w.terminal(turn)


def _commit(w: JournalWriter, turn: str, count: int) -> None:
    for phase in PHASES[:count]:
        w.commit(turn, phase)


def run_healthy(run_id: str) -> DemoRun:
    """Complete, finalize and resume side by side; an effect whose arguments carry a secret field."""
    w = JournalWriter(run_id)
    _complete(w, "t-invoice", "billing/invoice-42", intent="send-invoice")
    w.plan("t-report", "reports/weekly")
    _commit(w, "t-report", len(PHASES))  # every phase durable, only the terminal record is missing
    w.plan("t-sync", "crm/sync")
    _commit(w, "t-sync", 2)
    w.dispatch("t-sync", "fetch-contacts", "safe", args={"api_key": "sk-demo-never-shown", "page": 1})
    return DemoRun(
        run_id,
        "complete, finalize and resume",
        w.lines,
        {
            "t-invoice": ("complete", None),
            "t-report": ("finalize", None),
            "t-sync": ("resume", "dispatch"),
        },
    )


def run_effects(run_id: str) -> DemoRun:
    """Effects by class: an unsafe charge with no readback (blocked), an unsafe retry after an unknown
    readback (a second charge: blocked), an idempotent reissue and a safe replay (resume)."""
    w = JournalWriter(run_id)
    w.plan("t-charge", "payments/order-7")
    _commit(w, "t-charge", 3)
    w.dispatch("t-charge", "charge-card", "unsafe", amount_cents=4200)
    w.plan("t-refund", "payments/order-8")
    _commit(w, "t-refund", 3)
    w.dispatch("t-refund", "refund-card", "unsafe")
    w.observe("t-refund", "refund-card", "unknown")
    w.dispatch("t-refund", "refund-card", "unsafe")
    w.plan("t-email", "notify/order-7")
    _commit(w, "t-email", 3)
    w.dispatch("t-email", "send-receipt", "idempotent", key="receipt-order-7")
    w.dispatch("t-email", "render-receipt", "safe")
    return DemoRun(
        run_id,
        "unsafe effects: indeterminate and redispatched",
        w.lines,
        {
            "t-charge": ("blocked", "effect_indeterminate"),
            "t-refund": ("blocked", "unsafe_redispatch"),
            "t-email": ("resume", "execute"),
        },
    )


def run_turn_violations(run_id: str) -> DemoRun:
    """Turn-level violations: a skipped phase, and a turn re-planned with another lineage."""
    w = JournalWriter(run_id)
    w.plan("t-skip", "etl/load")
    w.commit("t-skip", "plan")
    w.commit("t-skip", "dispatch")  # envelope never committed
    w.plan("t-twice", "etl/extract")
    w.plan("t-twice", "etl/other-job")
    _complete(w, "t-fine", "etl/cleanup")
    return DemoRun(
        run_id,
        "turn-level violations",
        w.lines,
        {
            "t-skip": ("blocked", "phase_prefix_violation"),
            "t-twice": ("blocked", "lineage_conflict"),
            "t-fine": ("complete", None),
        },
    )


def run_fork_checkpoint_v1(run_id: str) -> DemoRun:
    """A runtime upgraded mid-run: v1 records, a checkpoint over them, v2 after; then a rewind (fork)
    that discards a turn planned after the rewind point."""
    w = JournalWriter(run_id, version=1)
    _complete(w, "t-legacy", "import/batch-1")
    w.plan("t-migrate", "import/batch-2")
    _commit(w, "t-migrate", 2)
    w.version = 2  # the runtime was upgraded: records from here on are v2, chained to the v1 ones
    w.checkpoint(with_state=True)
    for phase in PHASES[2:5]:
        w.commit("t-migrate", phase)
    rewind_to = w.mark() - 1  # the rewind keeps everything written so far
    w.plan("t-speculative", "import/batch-3")
    _commit(w, "t-speculative", 2)
    w.fork(rewind_to, reason="operator rewound the speculative batch")
    w.commit("t-migrate", PHASES[5])
    return DemoRun(
        run_id,
        "v1 records, a checkpoint, a fork that discards a turn",
        w.lines,
        {
            "t-legacy": ("complete", None),
            "t-migrate": ("resume", PHASES[6]),
            "t-speculative": ("discarded", None),
        },
    )


def run_chain_broken(run_id: str) -> DemoRun:
    """A run-level violation: a record whose prev does not chain. Every turn is blocked with it."""
    w = JournalWriter(run_id)
    _complete(w, "t-first", "ops/rotate-keys")
    w.plan("t-second", "ops/rotate-keys-2")
    record: dict[str, Any] = {
        "v": 2,
        "run": run_id,
        "branch": w.branch,
        "lsn": w.next_lsn[w.branch],
        "kind": "phase_committed",
        "at": w.clock(),
        "prev": "0" * 64,  # a torn chain: not the digest of the record before it
        "turn": "t-second",
        "phase": "plan",
    }
    w.write_raw(record)
    return DemoRun(
        run_id,
        "run-level violation: broken hash chain",
        w.lines,
        {"t-first": ("blocked", "chain_broken"), "t-second": ("blocked", "chain_broken")},
    )


DEMO_BUILDERS: tuple[Callable[[str], DemoRun], ...] = (
    run_healthy,
    run_effects,
    run_turn_violations,
    run_fork_checkpoint_v1,
    run_chain_broken,
)


def demo_journals(prefix: str = "demo") -> list[DemoRun]:
    names = ("healthy", "effects", "turn-violations", "fork-checkpoint-v1", "chain-broken")
    return [build(f"{prefix}-{name}") for build, name in zip(DEMO_BUILDERS, names, strict=True)]


def batches(lines: list[bytes], size: int) -> list[bytes]:
    """The journal as ingest batches (JSONL bodies) of ``size`` records."""
    return [b"".join(line + b"\n" for line in lines[i : i + size]) for i in range(0, len(lines), size)]


def demo_seed(*, prefix: str = "demo", batch_size: int = 7) -> list[str]:
    """Ingest the demo journals through the store's ingest service; returns the run ids. Each batch
    commits on its own, so each run's background assessment is requested (and coalesced) like a real
    runtime's."""
    run_ids = []
    for demo in demo_journals(prefix):
        for body in batches(demo.lines, batch_size):
            records_ingest(run_id=demo.run_id, body=body, content_type="application/x-ndjson", token=None)
        run_ids.append(demo.run_id)
    return run_ids


DEMO_MAIL = "oncall@demo.loopx.test"


def demo_notifications() -> bool:
    """The demo team (every run) gets an email channel and a rule that tells it of every held turn at once,
    so a held demo turn's email shows in the worker's output (Django's console mail backend, unless
    EMAIL_HOST is set). False when the team already has a channel (a second ``make run``)."""
    # Deferred like demo_seed's: benchmarks read this module without Django's app registry.
    from notifications.models import TeamChannel
    from notifications.services import channel_save, rule_save
    from teams.models import ALL_RUNS_TEAM
    from teams.services import team_ensure

    team = team_ensure(name=ALL_RUNS_TEAM, prefixes=[""])
    if TeamChannel.objects.filter(team=team).exists():
        return False
    channel = channel_save(actor=None, team=team, name="demo on-call mail", kind="email", target=DEMO_MAIL)
    rule_save(actor=None, team=team, name="every held turn", mode="immediate", threshold_minutes=15, channels=[channel])
    return True


def workload_lines(run_id: str, *, turns: int = 2, seed: int = 0) -> list[bytes]:
    """A small run for load: ``turns`` turns, most complete, every fifth left to resume, every seventh
    with an unsafe effect left without readback; deterministic in ``seed``."""
    w = JournalWriter(run_id, keep_lines=True)
    for n in range(turns):
        turn = f"t{n}"
        k = seed + n
        if k % 7 == 3:
            w.plan(turn, f"job-{k}")
            _commit(w, turn, 3)
            w.dispatch(turn, f"{turn}-pay", "unsafe")
        elif k % 5 == 4:
            w.plan(turn, f"job-{k}")
            _commit(w, turn, 4)
        else:
            _complete(w, turn, f"job-{k}", intent=f"{turn}-call")
    return w.lines
