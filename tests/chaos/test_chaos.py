"""The composition gate: SIGKILL the reference runtime at every transition of the compound
workload and check recovery jointly after every restart (recovery/chaos/rig.py lists the properties).

The sample is two full rounds of crash points (seeds 0..2T-1): every point once without and once with a
v1->v2 upgrade between crash and restart, and about half of them crashed again inside recovery.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import canonical_bytes
from recovery.chaos.ledger import Ledger
from recovery.chaos.rig import (
    EXPECTED_TRANSITIONS,
    RECOVERY_KINDS,
    REQUIRED_KINDS,
    SeedPlan,
    SeedResult,
    check_refold,
    describe,
    golden_run,
    run_seeds,
)
from recovery.chaos.runtime import INTENDED_EFFECTS

SAMPLE = range(2 * EXPECTED_TRANSITIONS)


def test_the_workload_has_the_pinned_number_of_transitions(tmp_path: Path) -> None:
    golden = golden_run(tmp_path)  # raises when the workload drifted from EXPECTED_TRANSITIONS
    assert len(golden.kinds) == EXPECTED_TRANSITIONS
    assert REQUIRED_KINDS <= set(golden.kinds)
    # The rewind is inside the workload: the fork, then the new branch's first record.
    fork = golden.kinds.index("append:fork")
    assert golden.kinds[fork + 1].startswith("append:")
    assert golden.end["effects"] == INTENDED_EFFECTS
    assert all(t["decision"] == "complete" for t in golden.end["turns"])


@pytest.mark.slow
def test_composition_gate_sample() -> None:
    summary = run_seeds(SAMPLE, jobs=2, echo=print)
    print(summary.table())
    failures = [describe(r) for r in summary.results if not r.ok]
    assert not failures, "failing seeds (rerun: manage.py chaos --seed S):\n" + "\n".join(failures)
    assert summary.covered_points() == set(range(1, EXPECTED_TRANSITIONS + 1))
    crash_kinds = {r.crash_kind for r in summary.results}
    assert REQUIRED_KINDS <= crash_kinds
    recovery_kinds = {r.recovery_crash_kind for r in summary.results if r.recovery_crash_kind}
    assert RECOVERY_KINDS <= recovery_kinds, f"recovery crash points not reached: {RECOVERY_KINDS - recovery_kinds}"
    assert sum(r.plan.upgrade for r in summary.results) == len(SAMPLE) // 2
    # The schema dimension really happened: a v1-era checkpoint rebuilt under v2 records above it.
    assert any(r.v1_checkpoint_with_v2_above for r in summary.results)
    # The operator was needed (unsafe effects of unknown outcome) and played through the approval call.
    assert sum(r.approvals for r in summary.results) > 0


@pytest.mark.slow
def test_a_runtime_that_skips_the_gate_is_caught() -> None:
    """The rig is not vacuous: a runtime that re-runs an unsafe effect of unknown outcome is a double
    effect in the external ledger and an `unsafe_redispatch` block."""
    unsafe_points = [s for s in SAMPLE if SeedPlan.of(s).crash_at in (14, 31)]
    summary = run_seeds(unsafe_points[:2], jobs=2, naive=True)
    assert {r.crash_kind for r in summary.results} == {"effect:unsafe"}
    for result in summary.results:
        assert "double_effects" in result.failures, describe(result)
        assert "unrecoverable" in result.failures, describe(result)


def test_refold_check_catches_a_checkpoint_that_lies(tmp_path: Path) -> None:
    golden_run(tmp_path)
    store = tmp_path / "seed--2" / "store" / "journal.jsonl"  # the golden v2 run
    lines = store.read_bytes().splitlines()
    honest = SeedResult(SeedPlan.of(0))
    check_refold(lines, honest)
    assert honest.ok
    tampered = []
    for line in lines:
        record = json.loads(line)
        if record["kind"] == "checkpoint" and record["branch"] == 0:
            record["state"]["turns"][0]["committed"] = record["state"]["turns"][0]["committed"][:-1]
        tampered.append(canonical_bytes(record))
    lying = SeedResult(SeedPlan.of(0))
    check_refold(tampered, lying)
    assert "refold_mismatches" in lying.failures


def test_ledger_dedupes_idempotent_effects_only(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        for _ in range(2):
            ledger.receive(run="r", turn="t", intent="i", effect_class="idempotent", key="k")
            ledger.receive(run="r", turn="t", intent="u", effect_class="unsafe", key=None)
            ledger.receive(run="r", turn="t", intent="s", effect_class="safe", key=None)
        assert ledger.effect_counts("r") == {"t/i": 1, "t/u": 2}
        assert ledger.receive(run="r", turn="t", intent="f", effect_class="unsafe", key=None, flaky=True) == "failed"
        assert ledger.receive(run="r", turn="t", intent="f", effect_class="unsafe", key=None, flaky=True) == "succeeded"
        assert ledger.effect_counts("r")["t/f"] == 1
    finally:
        ledger.close()


def test_a_finding_already_journaled_does_not_resolve_a_later_dispatch(tmp_path: Path) -> None:
    """Evidence names an intent, not a dispatch. The runtime journals an operator finding as a readback
    citing it; after that, the same finding must not settle a *new* dispatch of the unsafe intent."""
    from engine.writer import JournalWriter
    from recovery.chaos.store import FileGateway

    gw = FileGateway(tmp_path, "r")
    w = JournalWriter("r")
    w.plan("t", "job")
    w.commit("t", "plan")
    w.dispatch("t", "u", "unsafe")
    gw.ingest(list(w.lines))
    assert gw.decision("t").reason == "effect_indeterminate"
    gw.approve(turn="t", actor="op", reason="ledger has no row", evidence={"u": "not_happened"})
    (row,) = gw.evidence_rows()
    assert gw.decision("t").decision == "resume"
    readback = w.observe("t", "u", "failed")
    w.lines.pop()
    readback.update(source="operator_evidence", evidence_id=row.id)
    gw.ingest([canonical_bytes(readback)])
    w2 = JournalWriter("r")
    for line in gw.lines():
        w2.write_raw(json.loads(line))
    w2.dispatch("t", "u", "unsafe")  # the one retry the finding allowed, left without readback
    gw.ingest([w2.lines[-1]])
    decision = gw.decision("t")
    assert decision.decision == "blocked" and decision.reason == "effect_indeterminate"
    assert not gw.assessment().violations
    # Why the rule: handed to the engine as "latest finding per intent", the old finding binds to the new
    # dispatch and lets the turn resume although the world may have seen that dispatch.
    from engine import Evidence, assess

    stale = assess(gw.lines(), evidence={("t", "u"): Evidence.NOT_HAPPENED})
    assert [t.decision.value for t in stale.turns] == ["resume"]


# Over HTTP against a live server (the store's ingest API and recovery gate), one seed per interaction
# the gate exists for: crash inside the rewind (after the fork record, before the new branch's first
# record: 28), an unsafe effect on the branch that is then forked (26), an unsafe intent journaled but not
# sent, then re-sent after `not_happened` (25), an unsafe effect with a second crash inside recovery (64),
# a v1 checkpoint continued by a v2 runtime (23), and a second send after `not_happened` left without
# readback (76: the service once let the old finding settle it; evidence is now bound to its dispatch).
HTTP_SEEDS = (28, 26, 25, 64, 23, 76)  # 76: stale operator evidence once settled a later unsafe send


@pytest.mark.slow
def test_composition_gate_over_http() -> None:
    summary = run_seeds(HTTP_SEEDS, jobs=2, store="http", echo=print)
    print(summary.table())
    failures = [describe(r) for r in summary.results if not r.ok]
    assert not failures, "failing seeds (rerun: manage.py chaos --store http --seed S):\n" + "\n".join(failures)
    kinds = {r.crash_kind for r in summary.results}
    assert {"append:fork", "effect:unsafe", "append:intent_dispatched"} <= kinds
    assert sum(r.approvals for r in summary.results) > 0


@pytest.mark.slow
def test_web_process_killed_mid_batch_leaves_no_partial_batch(tmp_path: Path) -> None:
    from recovery.chaos.server import LiveServer
    from recovery.chaos.service_crash import web_kill_trial

    with LiveServer(tmp_path / "server") as server:
        # Seed 0's kill is placed (a failpoint parks the batch inside its transaction); the others are
        # timed at random, so some land before, during or after the commit.
        trials = [web_kill_trial(server, seed, records=1500, placed=seed == 0) for seed in range(3)]
    for trial in trials:
        print(f"web kill seed {trial.seed}: after {trial.delay:.2f}s, acknowledged={trial.acknowledged}, "
              f"stored {trial.stored_after_kill}/{trial.records}")
    assert not [(t.seed, t.failures) for t in trials if t.failures]
    # The placed kill landed while the batch was in flight: the POST died with the server and nothing of
    # the batch survived until its redelivery.
    assert not trials[0].acknowledged and trials[0].stored_after_kill == 0
