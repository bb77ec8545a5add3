"""The composition gate: SIGKILL the reference runtime at every transition of the compound
workload, and the service itself at its kill points, and check recovery jointly after every restart
(certification/rig.py lists the properties).

The certification is the HTTP sample: two full rounds of the crash matrix (every runtime transition, the
web killed mid-batch, the worker killed mid-assessment, a turn taken over from a dead worker, a worker
stalled past its lease at a dispatch while another takes its turn over) against a
live service on PostgreSQL and Redis with a real worker, every point once without and once with a v1->v2
upgrade between crash and restart. The file sample checks the workload and the rig themselves, fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from certification.http import lease_seconds
from certification.ledger import Ledger
from certification.rig import (
    EXPECTED_SERVICE_POINTS,
    EXPECTED_STALL_POINTS,
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
    stall_points,
)
from certification.runtime import EXIT_FENCED, EXIT_LEASE_REFUSED, INTENDED_EFFECTS
from engine import canonical_bytes

SAMPLE = range(2 * EXPECTED_TRANSITIONS)


def test_the_workload_has_the_pinned_number_of_transitions(tmp_path: Path) -> None:
    golden = golden_run(tmp_path)  # raises when the workload drifted from EXPECTED_TRANSITIONS
    assert len(golden.kinds) == EXPECTED_TRANSITIONS
    assert set(golden.kinds) >= REQUIRED_KINDS
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
    assert len(matrix) == EXPECTED_TRANSITIONS + EXPECTED_SERVICE_POINTS + EXPECTED_STALL_POINTS == len(set(matrix))
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
    assert crash_kinds >= REQUIRED_KINDS
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


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
def test_a_runtime_without_the_lease_check_is_caught() -> None:
    """The stall seeds are not vacuous: a worker stalled past its lease after its unsafe dispatch was
    acknowledged, which then trusts the lease it no longer holds, sends the effect a second time (the
    fence refuses only its records, after the fact); the rig reports the double effect."""
    matrix_size = EXPECTED_TRANSITIONS + EXPECTED_SERVICE_POINTS + EXPECTED_STALL_POINTS
    first_stall = EXPECTED_TRANSITIONS + EXPECTED_SERVICE_POINTS
    # One stall of each variant at the first unsafe dispatch (the matrix lists them variant "a" first).
    unsafe = [s for s in range(first_stall, matrix_size) if s in (first_stall + 4, first_stall + 5)]
    summary = run_seeds(unsafe, jobs=2, store="http", lease_check=False, echo=print)
    points = {(r.plan.point.variant, r.plan.point.effect) for r in summary.results}
    assert points == {("a", "unsafe"), ("b", "unsafe")}
    for result in summary.results:
        if result.plan.point.variant == "b":
            assert "double_effects" in result.failures, describe(result)
        else:  # before the acknowledgment, the fence alone stops the stalled worker before its effect
            assert result.ok, describe(result)


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
    from certification.store import FileGateway
    from engine.writer import JournalWriter

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
HTTP_MATRIX = EXPECTED_TRANSITIONS + EXPECTED_SERVICE_POINTS + EXPECTED_STALL_POINTS
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
    assert {r.crash_kind for r in summary.results} >= REQUIRED_KINDS
    recovery_kinds = {r.recovery_crash_kind for r in summary.results if r.recovery_crash_kind}
    assert recovery_kinds >= RECOVERY_KINDS, f"recovery crash points not reached: {RECOVERY_KINDS - recovery_kinds}"
    # Every armed kill of the service fired (the rig fails a seed whose kill was never reached), and the
    # supervisor brought the service back each time.
    kinds = ("web", "worker", "takeover")
    by_kind = {kind: [r for r in summary.results if r.plan.point.kind == kind] for kind in kinds}
    # A kill is pre-empted only when the seed's worker stopped on its lease first (another seed's kill held
    # the service down longer than the lease): rare, and counted.
    service = by_kind["web"] + by_kind["worker"]
    assert all(r.service_kills + r.kills_preempted == 1 for r in service)
    assert sum(r.kills_preempted for r in service) <= len(service) // 10, summary.table()
    fired = {kind: sum(r.service_kills for r in by_kind[kind]) for kind in ("web", "worker")}
    assert summary.restarts["web"] >= fired["web"] and summary.restarts["worker"] >= fired["worker"]
    # Every turn taken over from a dead worker saw that worker's late write refused by the fence.
    assert all(r.stale_writes_refused >= 1 for r in by_kind["takeover"])
    # Every stalled worker was stopped past its lease and ended as its point says (the rig fails a seed
    # otherwise): fenced, or refused by its own lease check before an unsafe effect.
    stalls = [r for r in summary.results if r.plan.point.kind == "stall"]
    assert len(stalls) == 2 * EXPECTED_STALL_POINTS
    assert {r.stall_outcome for r in stalls} == {"fenced", "lease-refused"}
    # The operator was needed and decided through the console's services, in bulk too: a bulk approval
    # left the turns with unconfirmed effects alone, a bulk block held them until the evidence came.
    assert sum(r.approvals for r in summary.results) > 0
    assert sum(r.bulk_left_alone for r in summary.results) > 0
    assert sum(r.bulk_blocked for r in summary.results) > 0
    assert any(r.v1_checkpoint_with_v2_above for r in summary.results)


def test_the_stall_points_are_pinned_and_placed_at_every_dispatch_that_is_not_safe(tmp_path: Path) -> None:
    kinds = golden_run(tmp_path).kinds
    points = stall_points(kinds)
    assert len(points) == EXPECTED_STALL_POINTS
    # Each stall is at the dispatch record of an effect that is not safe, in both variants.
    assert all(kinds[p.at - 1] == "append:intent_dispatched" for p in points)
    assert all(kinds[p.at] == f"effect:{p.effect}" for p in points)
    assert sorted((p.effect, p.variant) for p in points) == sorted(
        [("unsafe", v) for v in "ab"] * 3 + [("idempotent", v) for v in "ab"] * 3
    )
    # A stalled worker is never killed: it is continued, and must end refused by the fence (before the
    # acknowledgment, or after an idempotent effect the key made harmless) or by its own lease check.
    assert all(p.crash_at == 0 for p in points)
    ends = {(p.variant, p.effect): p.stall_ends for p in points}
    assert ends == {
        ("a", "unsafe"): EXIT_FENCED,
        ("a", "idempotent"): EXIT_FENCED,
        ("b", "unsafe"): EXIT_LEASE_REFUSED,
        ("b", "idempotent"): EXIT_FENCED,
    }
    # `make chaos` (500 seeds) stalls a worker in at least 50 of them, and the HTTP sample in every variant.
    matrix = crash_matrix(kinds, service=True)
    stalled = [s for s in range(500) if SeedPlan.of(s, matrix).point.kind == "stall"]
    assert len(stalled) >= 50
    sample = {SeedPlan.of(s, matrix).point for s in range(2 * len(matrix))}
    assert set(points) <= sample


def test_the_lease_is_read_from_the_claim_answer_or_the_rig(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from loopx_client.gate import Claim

    monkeypatch.setenv("LOOPX_CHAOS_LEASE_SECONDS", "3")
    assert lease_seconds({"lease_seconds": 5, "fencing_token": 1}) == 5.0
    assert lease_seconds({"fencing_token": 1}) == 3.0
    # The client's Claim: with `lease_seconds` it is the service's; a client without it, the rig's.
    names = {f.name for f in dataclasses.fields(Claim)}
    base = {"run": "r", "turn": "t", "worker_id": "w", "fencing_token": 1, "expires_at": "2026-01-01T00:00:00+00:00"}
    if "lease_seconds" in names:
        assert lease_seconds(Claim(**{k: v for k, v in base.items() if k in names}, lease_seconds=7)) == 7.0
    else:
        assert lease_seconds(Claim(**base)) == 3.0


def test_a_takeover_point_is_placed_where_the_dead_worker_holds_its_claim() -> None:
    point = Point("takeover", 12, "takeover of turn 2")
    assert point.crash_at == 13  # killed after its next write under the claim, not before it


@pytest.mark.slow
def test_web_process_killed_mid_batch_leaves_no_partial_batch(tmp_path: Path) -> None:
    from certification.server import LiveServer
    from certification.service_crash import web_kill_trial

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
