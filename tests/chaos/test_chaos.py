"""The composition gate: SIGKILL the reference runtime at every transition of the compound
workload, and the service itself at its kill points, and check recovery jointly after every restart
(recovery/chaos/rig.py lists the properties).

The certification is the HTTP sample: two full rounds of the crash matrix (every runtime transition, the
web killed mid-batch, the worker killed mid-assessment, a turn taken over from a dead worker) against a
live service on PostgreSQL and Redis with a real worker, every point once without and once with a v1->v2
upgrade between crash and restart. The file sample checks the workload and the rig themselves, fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import canonical_bytes
from recovery.chaos.ledger import Ledger
from recovery.chaos.rig import (
    EXPECTED_SERVICE_POINTS,
    EXPECTED_TRANSITIONS,
    RECOVERY_KINDS,
    REQUIRED_KINDS,
    WEB_KINDS,
    Point,
    SeedPlan,
    SeedResult,
    check_refold,
    crash_matrix,
    describe,
    golden_run,
    run_seeds,
    service_points,
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
    # A worker claims each turn right after planning it: the lease and the token that fence its writes.
    planned = [i for i, kind in enumerate(golden.kinds) if kind == "append:turn_planned"]
    assert [golden.kinds[i + 1] for i in planned] == ["claim"] * 3


def test_the_service_kill_points_are_pinned_and_placed_in_the_workload(tmp_path: Path) -> None:
    kinds = golden_run(tmp_path).kinds
    points = service_points(kinds)
    assert len(points) == EXPECTED_SERVICE_POINTS
    web = [p for p in points if p.kind == "web"]
    # The web dies inside the batch of the first append of each kind (and the runtime right after it).
    assert [kinds[p.at - 1] for p in web] == list(WEB_KINDS)
    assert all(p.crash_at == p.at + 1 for p in web)
    worker = [p for p in points if p.kind == "worker"]
    assert [kinds[p.at - 1] for p in worker] == ["append:intent_dispatched", "append:fork", "append:checkpoint"]
    assert worker[-1].at == len(kinds)  # the assessment of the final prefix too
    takeover = [p for p in points if p.kind == "takeover"]
    assert [kinds[p.at - 1] for p in takeover] == ["claim"] * 3
    matrix = crash_matrix(kinds, service=True)
    assert len(matrix) == EXPECTED_TRANSITIONS + EXPECTED_SERVICE_POINTS == len(set(matrix))
    # Seeds 0..2N-1 take every point of the matrix once without and once with the upgrade.
    plans = [SeedPlan.of(seed, matrix) for seed in range(2 * len(matrix))]
    for point in matrix:
        assert sorted(p.upgrade for p in plans if p.point == point) == [False, True]


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
    # The operator's readback inside recovery is reached by the HTTP sample's seeds (asserted there).
    assert {"recovery:gate", "recovery:claim"} <= recovery_kinds
    assert sum(r.plan.upgrade for r in summary.results) == len(SAMPLE) // 2
    # The schema dimension really happened: a v1-era checkpoint rebuilt under v2 records above it.
    assert any(r.v1_checkpoint_with_v2_above for r in summary.results)
    # The operator was needed (unsafe effects of unknown outcome) and played through the approval call.
    assert sum(r.approvals for r in summary.results) > 0


@pytest.mark.slow
def test_a_runtime_that_skips_the_gate_is_caught(tmp_path: Path) -> None:
    """The rig is not vacuous: a runtime that re-runs an unsafe effect of unknown outcome is a double
    effect in the external ledger and an `unsafe_redispatch` block."""
    kinds = golden_run(Path(tmp_path)).kinds
    matrix = crash_matrix(kinds, service=False)
    unsafe_points = [s for s in SAMPLE if kinds[SeedPlan.of(s, matrix).crash_at - 1] == "effect:unsafe"]
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


# The certification: the HTTP sample, twice the matrix (every point with and without the upgrade).
HTTP_MATRIX = EXPECTED_TRANSITIONS + EXPECTED_SERVICE_POINTS
HTTP_SAMPLE = range(2 * HTTP_MATRIX)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
def test_composition_gate_over_http() -> None:
    summary = run_seeds(HTTP_SAMPLE, jobs=2, store="http", echo=print)
    print(summary.table())
    failures = [describe(r) for r in summary.results if not r.ok]
    assert not failures, "failing seeds (rerun: manage.py chaos --seed S):\n" + "\n".join(failures)
    assert len(summary.points) == HTTP_MATRIX and summary.covered_matrix() == set(summary.points)
    for point in summary.points:
        upgrades = sorted(r.plan.upgrade for r in summary.results if r.plan.point == point)
        assert upgrades == [False, True], point
    assert REQUIRED_KINDS <= {r.crash_kind for r in summary.results}
    recovery_kinds = {r.recovery_crash_kind for r in summary.results if r.recovery_crash_kind}
    assert RECOVERY_KINDS <= recovery_kinds, f"recovery crash points not reached: {RECOVERY_KINDS - recovery_kinds}"
    # Every armed kill of the service fired (the rig fails a seed whose kill was never reached), and the
    # supervisor brought the service back each time.
    kinds = ("web", "worker", "takeover")
    by_kind = {kind: [r for r in summary.results if r.plan.point.kind == kind] for kind in kinds}
    assert all(r.service_kills == 1 for r in by_kind["web"] + by_kind["worker"])
    assert summary.restarts["web"] >= len(by_kind["web"]) and summary.restarts["worker"] >= len(by_kind["worker"])
    # Every turn taken over from a dead worker saw that worker's late write refused by the fence.
    assert all(r.stale_writes_refused >= 1 for r in by_kind["takeover"])
    # The operator was needed and decided through the console's services, in bulk too: a bulk approval
    # left the turns with unconfirmed effects alone, a bulk block held them until the evidence came.
    assert sum(r.approvals for r in summary.results) > 0
    assert sum(r.bulk_left_alone for r in summary.results) > 0
    assert sum(r.bulk_blocked for r in summary.results) > 0
    assert any(r.v1_checkpoint_with_v2_above for r in summary.results)


def test_a_takeover_point_is_placed_where_the_dead_worker_holds_its_claim() -> None:
    point = Point("takeover", 12, "takeover of turn 2")
    assert point.crash_at == 13  # killed after its next write under the claim, not before it


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
