"""Journals that exercise every part of the console, written with the engine's JournalWriter, ingested
through the store's service and assessed by the store's assessment service (nothing is faked)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.writer import JournalWriter
from journals.models import Run, Turn
from journals.services import records_ingest
from recovery.services import assessment_refresh

SECRET = "sk-live-CONSOLE-SECRET-4711"


@dataclass
class Scenario:
    run: Run
    turns: dict[str, Turn]


def ingest(writer: JournalWriter) -> Run:
    result = records_ingest(run_id=writer.run, body=writer.data(), content_type="application/x-ndjson", token=None)
    assessment_refresh(run=result.run)
    return Run.objects.get(pk=result.run.pk)


def payments_run(run_id: str = "pay-run-1") -> Scenario:
    """One run with a turn of every kind: complete, resume, blocked (indeterminate effect and a phase out of
    order), discarded by a fork, a checkpoint, and secrets inside records."""
    w = JournalWriter(run_id)
    w.complete_turn("t-complete", lineage="job-7")
    # Resume: three phases committed, a safe intent without readback.
    w.plan("t-resume", lineage="job-8")
    for phase in ("plan", "envelope", "dispatch"):
        w.commit("t-resume", phase)
    w.dispatch("t-resume", "fetch-quote", "safe", api_key=SECRET)
    # Blocked: an unsafe charge dispatched, no readback.
    w.plan("t-charge", lineage="job-9")
    for phase in ("plan", "envelope", "dispatch"):
        w.commit("t-charge", phase)
    w.dispatch("t-charge", "charge-card", "unsafe", card={"number": "4242", "card_token": SECRET})
    w.dispatch("t-charge", "send-receipt", "idempotent", key="rcpt-9")
    w.checkpoint()
    # Blocked: a phase committed out of order.
    w.plan("t-skip", lineage="job-10")
    w.commit("t-skip", "plan")
    w.commit("t-skip", "execute")
    # A rewind: the turn planned after the mark is discarded with its branch suffix.
    keep = w.next_lsn[w.branch] - 1
    w.plan("t-lost", lineage="job-11")
    w.commit("t-lost", "plan")
    w.fork(keep, reason="operator rewind")
    w.plan("t-after", lineage="job-12")
    w.commit("t-after", "plan")
    run = ingest(w)
    return Scenario(run=run, turns={t.turn_id: t for t in Turn.objects.filter(run=run)})


def torn_run(run_id: str = "torn-run-1") -> Scenario:
    """A run whose journal has a gap: a run-level fault that blocks every turn and cannot be approved."""
    w = JournalWriter(run_id)
    w.plan("t-a", lineage="job-1")
    w.commit("t-a", "plan")
    w.next_lsn[0] += 1  # skip one lsn: the record that should be there is missing
    w.commit("t-a", "envelope")
    run = ingest(w)
    return Scenario(run=run, turns={t.turn_id: t for t in Turn.objects.filter(run=run)})


def many_runs(count: int, turns_per_run: int = 1, prefix: str = "bulk") -> list[Run]:
    """``count`` runs, each with ``turns_per_run`` turns blocked on an indeterminate unsafe effect... or a
    phase out of order (every other run), so that lists and bulk actions have rows of both kinds."""
    runs = []
    for i in range(count):
        w = JournalWriter(f"{prefix}-{i:04d}")
        for j in range(turns_per_run):
            turn = f"turn-{i}-{j}"
            w.plan(turn, lineage=f"job-{i}-{j}")
            w.commit(turn, "plan")
            if i % 2 == 0:
                w.commit(turn, "execute")  # phase_prefix_violation: approvable in bulk
            else:
                w.dispatch(turn, f"pay-{j}", "unsafe", password=SECRET)
        runs.append(ingest(w))
    return runs


def runs_of_each_status() -> dict[str, Run]:
    """A run of each status (docs/state.md, "A run's status"): the payments run needs attention, gap-run is
    blocked (a record past a gap of lsns), new-run runs (never assessed), done-run is done."""
    pay = payments_run()
    done = JournalWriter("done-run")
    done.complete_turn("t-1")
    gap = JournalWriter("gap-run")
    gap.complete_turn("t-1")
    gap.next_lsn[gap.branch] += 2
    gap.plan("t-2")
    fresh = JournalWriter("new-run")
    fresh.plan("t-1")
    records_ingest(run_id="new-run", body=fresh.data(), content_type="application/x-ndjson", token=None)
    return {
        "needs_attention": pay.run,
        "done": ingest(done),
        "blocked": ingest(gap),
        "running": Run.objects.get(run_id="new-run"),
    }
