"""The scheduled audits, called as services: each finds its typed fact, opens it once, and repairs
nothing silently."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from audits.checks import (
    audit_assessment_sweep,
    audit_chain_verification,
    audit_engine_change,
    audit_stale_turns,
    audit_unclaimed_blocked_turns,
)
from audits.models import ChainCursor
from engine import assess_kept as engine_assess_kept
from engine.canonical import parse_line
from engine.writer import JournalWriter
from journals.models import JournalRecord, PendingAssessment, Run, Turn
from ops.demo import run_chain_broken, run_effects, run_fork_checkpoint_v1, run_healthy, workload_lines
from recovery import services as recovery_services
from recovery.background import assessment_run
from recovery.findings.models import Finding
from recovery.findings.services import finding_acknowledge, finding_resolve
from recovery.models import Assessment
from recovery.selectors import gate_view
from recovery.services import assessment_refresh, turn_block
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db
NOW = timedelta(0)


def findings(kind: str) -> list[tuple[str, str, str]]:
    return sorted(Finding.objects.filter(kind=kind).values_list("run__run_id", "subject", "state"))


def tamper(sql: str, params: list) -> None:
    """Change stored records behind the application's back (the append-only trigger is bypassed the way
    an administrator with superuser rights could; SQLite has no trigger)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql.format(table=JournalRecord._meta.db_table), params)
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = DEFAULT")


def chain(**overrides) -> dict:
    options = {"record_budget": 100_000, "full_passes": 0, "full_pass_every": NOW, "limit": 100, **overrides}
    return audit_chain_verification(**options).as_dict()


# --- the assessment sweep -------------------------------------------------------------------------------


def test_sweep_publishes_a_batch_whose_enqueue_was_lost(published, django_capture_on_commit_callbacks):
    run = ingest("run-lost", workload_lines("run-lost"))  # no on_commit ran: as if the process died there
    assert published.run_ids == []
    report = audit_assessment_sweep(grace=NOW, republish_after=timedelta(hours=1), limit=10).as_dict()
    assert report["never_enqueued"] == 1 and report["published"] == 1
    assert published.run_ids == ["run-lost"]
    missed = Finding.objects.get(kind="assessment_missed", run=run)
    assert missed.evidence["cause"] == "committed but never enqueued"
    # Published now: the next pass leaves it alone until republish_after, and opens nothing twice.
    audit_assessment_sweep(grace=NOW, republish_after=timedelta(hours=1), limit=10)
    assert published.run_ids == ["run-lost"]
    assert assessment_run(run_id="run-lost") == "stored"
    assert audit_assessment_sweep(grace=NOW, republish_after=NOW, limit=10).checked == 0


def test_sweep_waits_for_the_grace_period(published):
    ingest("run-fresh", workload_lines("run-fresh"))
    assert audit_assessment_sweep(grace=timedelta(minutes=5), republish_after=NOW, limit=10).checked == 0
    assert published.run_ids == []


def test_sweep_republishes_a_message_the_broker_lost(published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ingest("run-dropped", workload_lines("run-dropped"))
    assert published.run_ids == ["run-dropped"]
    report = audit_assessment_sweep(grace=NOW, republish_after=NOW, limit=10).as_dict()
    assert report["republished"] == 1 and published.run_ids == ["run-dropped", "run-dropped"]
    assert not Finding.objects.exists()  # a backlog is not an incident


def test_sweep_requests_a_run_left_behind_its_prefix(published, django_capture_on_commit_callbacks):
    run = ingest("run-behind", workload_lines("run-behind"))
    assessment_run(run_id="run-behind")
    # A later batch whose task lowered the flag and then died for good (no redelivery).
    more = JournalWriter("run-behind-2")
    more.complete_turn("x")
    ingest("run-behind-2", more.lines)
    PendingAssessment.objects.filter(run__run_id="run-behind-2").update(
        pending=False, started_at=timezone.now() - timedelta(hours=2)
    )
    with django_capture_on_commit_callbacks(execute=True):
        report = audit_assessment_sweep(grace=NOW, republish_after=timedelta(hours=1), limit=10).as_dict()
    assert report["requested"] == 1 and published.run_ids == ["run-behind-2"]
    assert PendingAssessment.objects.get(run__run_id="run-behind-2").pending
    assert findings("assessment_missed") == [("run-behind-2", "", "open")]
    assert Run.objects.get(pk=run.pk).assessed_seq == run.last_seq


def test_sweep_leaves_a_task_in_flight_alone(published):
    ingest("run-busy", workload_lines("run-busy"))
    PendingAssessment.objects.filter(run__run_id="run-busy").update(
        pending=False, started_at=timezone.now(), lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    report = audit_assessment_sweep(grace=NOW, republish_after=NOW, limit=10).as_dict()
    assert report["in_flight"] == 1 and published.run_ids == []


# --- stale turns ----------------------------------------------------------------------------------------


def test_stale_unfinished_turns_become_lost_turn_findings(published):
    demo = run_healthy("run-stale")
    ingest(demo.run_id, demo.lines)
    assessment_run(run_id=demo.run_id)
    report = audit_stale_turns(idle=NOW, limit=100).as_dict()
    # complete is finished; finalize and resume turns are unfinished and silent.
    assert findings("lost_turn") == [("run-stale", "t-report", "open"), ("run-stale", "t-sync", "open")]
    assert report["opened"] == 2
    lost = Finding.objects.get(kind="lost_turn", subject="t-sync")
    assert lost.evidence["resume_from"] == "dispatch" and lost.evidence["last_seq"] == len(demo.lines)
    # A second pass touches, never reopens; a generous threshold finds nothing new.
    assert audit_stale_turns(idle=NOW, limit=100).as_dict()["still_lost"] == 2
    assert Finding.objects.filter(kind="lost_turn").count() == 2


def test_stale_turns_reassess_first_and_clear_turns_that_finished(published):
    w = JournalWriter("run-done-late")
    w.plan("t1", "job")
    for phase in ("plan", "envelope", "dispatch"):
        w.commit("t1", phase)
    ingest("run-done-late", w.lines)
    assessment_run(run_id="run-done-late")
    audit_stale_turns(idle=NOW, limit=100)
    assert findings("lost_turn") == [("run-done-late", "t1", "open")]
    for phase in ("execute", "readback", "writeback", "spend"):
        w.commit("t1", phase)
    w.terminal("t1")
    ingest("run-done-late", w.lines[-5:])  # the turn finished; no task has assessed it yet
    report = audit_stale_turns(idle=NOW, limit=100).as_dict()
    assert report["cleared"] == 1
    finding = Finding.objects.get(kind="lost_turn")
    assert finding.state == "resolved" and finding.resolved_by_name == "audit:stale_turns"


def test_stale_turns_respect_the_threshold(published):
    demo = run_healthy("run-recent")
    ingest(demo.run_id, demo.lines)
    assessment_run(run_id=demo.run_id)
    assert audit_stale_turns(idle=timedelta(hours=1), limit=100).checked == 0
    assert not Finding.objects.exists()


# --- chain verification ---------------------------------------------------------------------------------


def test_clean_journals_verify_incrementally(published):
    for demo in (run_healthy("c-1"), run_fork_checkpoint_v1("c-2")):  # forks, checkpoints, v1 then v2
        ingest(demo.run_id, demo.lines, batch_size=6)
    first = chain()
    assert first["checked"] == 2 and first["records"] == 23 + 21
    assert not Finding.objects.exists()
    assert chain()["checked"] == 0  # nothing new: nothing read
    w = JournalWriter("c-3")
    w.complete_turn("t")
    ingest("c-3", w.lines[:4])
    assert chain()["records"] == 4
    ingest("c-3", w.lines[4:])
    assert chain()["records"] == len(w.lines) - 4  # only the new records
    cursor = ChainCursor.objects.get(run__run_id="c-3")
    assert cursor.verified_seq == len(w.lines) and cursor.prefix_digest == Run.objects.get(run_id="c-3").prefix_digest
    assert not Finding.objects.exists()


def test_a_journal_ingested_with_a_broken_chain_is_a_chain_broken_finding(published):
    demo = run_chain_broken("c-broken")
    run = ingest(demo.run_id, demo.lines)
    report = chain()
    assert report["chain_broken_opened"] == 1
    finding = Finding.objects.get(run=run)
    assert (finding.kind, finding.fact_key, finding.blocks_run) == ("chain_broken", "prev:0:10", True)
    assert finding.evidence["seq"] == 11


def test_changed_bytes_are_storage_corruption_and_block_the_run(published, operator):
    demo = run_healthy("c-tamper")
    run = ingest(demo.run_id, demo.lines)
    assessment_run(run_id=demo.run_id)
    chain()
    assert not Finding.objects.exists()
    turn = Turn.objects.get(run=run, turn_id="t-sync")
    assert gate_view(turn=turn, assessment=assessment_refresh(run=run)).gate == "proceed"
    original = bytes(JournalRecord.objects.get(run=run, seq=5).line)
    forged = original.replace(b'"at":"2026', b'"at":"2027')
    assert forged != original
    tamper("UPDATE {table} SET line = %s WHERE run_id = %s AND seq = 5", [forged, run.pk])
    chain(full_passes=10)  # rewinds the fully verified cursor: the next pass re-reads from seq 1
    report = chain()
    assert report["storage_corruption_opened"] >= 1
    corrupt = Finding.objects.get(kind="storage_corruption", fact_key="record:5")
    assert corrupt.evidence["recorded_digest"] != corrupt.evidence["stored_bytes_digest"]
    assert "2027" not in str(corrupt.evidence)  # never quotes the bytes
    view = gate_view(turn=turn, assessment=assessment_refresh(run=run))
    assert (view.gate, view.reason) == ("hold", "storage_corruption")
    assert view.row.decision == "resume"  # the engine's answer is still there to see
    # Only a person lifts it; the audit never does, however often it runs.
    chain(full_passes=10)
    chain()
    assert gate_view(turn=turn, assessment=assessment_refresh(run=run)).gate == "hold"
    for finding in Finding.objects.filter(run=run, state="open"):
        finding_resolve(finding=finding, actor=operator, reason="restored the record from the recovery package")
    assert gate_view(turn=turn, assessment=assessment_refresh(run=run)).gate == "proceed"


def test_a_deleted_record_is_storage_corruption(published):
    w = JournalWriter("c-hole")
    w.complete_turn("t")
    run = ingest("c-hole", w.lines)
    tamper("DELETE FROM {table} WHERE run_id = %s AND seq = 3", [run.pk])
    chain()
    keys = set(Finding.objects.filter(run=run).values_list("kind", "fact_key"))
    assert ("storage_corruption", "seq:3") in keys  # the gap in the stored sequence
    assert ("storage_corruption", "prefix") in keys  # and the prefix no longer adds up
    assert ("chain_broken", "lsn:0:3") in keys  # the next record's lsn and prev do not follow


def test_a_rewritten_digest_column_is_caught_by_the_running_prefix(published):
    w = JournalWriter("c-both")
    w.complete_turn("t")
    run = ingest("c-both", w.lines)
    record = JournalRecord.objects.get(run=run, seq=3)
    forged = bytes(record.line).replace(b'"phase":"envelope"', b'"phase":"execute"')
    assert forged != bytes(record.line)
    tamper(
        "UPDATE {table} SET line = %s, digest = %s WHERE run_id = %s AND seq = 3",
        [forged, parse_line(forged).digest, run.pk],
    )
    chain()
    keys = set(Finding.objects.filter(run=run).values_list("kind", "fact_key"))
    assert ("storage_corruption", "prefix") in keys
    assert ("chain_broken", "prev:0:3") in keys  # the next record still chains to the original


def test_the_record_budget_bounds_a_pass(published):
    ingest("c-big", workload_lines("c-big", turns=10))
    assert chain(record_budget=25)["records"] == 25
    assert ChainCursor.objects.get(run__run_id="c-big").verified_seq == 25
    rest = chain()
    assert rest["records"] == Run.objects.get(run_id="c-big").last_seq - 25
    assert not Finding.objects.exists()


# --- engine change --------------------------------------------------------------------------------------


def test_a_new_engine_version_reassesses_and_keeps_the_old_assessment(published, monkeypatch):
    for demo in (run_healthy("e-1"), run_effects("e-2")):
        ingest(demo.run_id, demo.lines)
        assessment_run(run_id=demo.run_id)
    assert audit_engine_change(limit=10).checked == 0  # all current
    old_version = recovery_services.ENGINE_VERSION

    def changed_engine(*args, **kwargs):
        """The next engine decides e-1's finalize turn differently for the same input."""
        done = engine_assess_kept(*args, **kwargs)
        if done is None:
            return None
        result = done.result
        turns = tuple(
            dataclasses.replace(t, resume_from="spend", decision=type(t.decision)("resume"))
            if (result.run, t.turn) == ("e-1", "t-report")
            else t
            for t in result.turns
        )
        return done._replace(result=dataclasses.replace(result, turns=turns), changed=None)

    monkeypatch.setattr(recovery_services, "ENGINE_VERSION", "9.9.9")
    # The fold snapshots were made by the old version: the new one folds every run from the start.
    monkeypatch.setattr(recovery_services, "assess_kept", changed_engine)
    report = audit_engine_change(limit=10).as_dict()
    assert report["reassessed"] == 2 and report["decision_changed"] == 1
    versions = sorted(Assessment.objects.values_list("run__run_id", "engine_version"))
    assert versions == [("e-1", old_version), ("e-1", "9.9.9"), ("e-2", old_version), ("e-2", "9.9.9")]
    changed = Finding.objects.get(kind="decision_changed")
    assert changed.subject == "t-report" and changed.fact_key == f"{old_version}/{old_version}->9.9.9/{old_version}"
    assert (changed.evidence["old"]["decision"], changed.evidence["new"]["decision"]) == ("finalize", "resume")
    assert audit_engine_change(limit=10).checked == 0  # done: nothing twice


# --- unclaimed blocked turns ----------------------------------------------------------------------------


def test_blocked_turns_nobody_claimed_are_escalated_with_their_age(published, operator):
    effects, broken = run_effects("b-1"), run_chain_broken("b-2")
    for demo in (effects, broken):
        ingest(demo.run_id, demo.lines)
        assessment_run(run_id=demo.run_id)
    assert audit_unclaimed_blocked_turns(older_than=timedelta(hours=1), limit=100).checked == 0
    audit_unclaimed_blocked_turns(older_than=NOW, limit=100)
    rows = sorted(Finding.objects.values_list("run__run_id", "subject", "fact_key"))
    assert rows == [
        ("b-1", "t-charge", "effect_indeterminate"),
        ("b-1", "t-refund", "unsafe_redispatch"),
        ("b-2", "", "chain_broken"),  # a run-level reason: one finding for the run, not one per turn
    ]
    charge = Finding.objects.get(subject="t-charge")
    assert charge.evidence["age_seconds"] >= 0 and charge.evidence["level"] == "turn"
    # Acknowledging claims it (it stays acknowledged); an operator's block on the turn clears it.
    finding_acknowledge(finding=charge, actor=operator, reason="calling the payment provider")
    refund = Turn.objects.get(run__run_id="b-1", turn_id="t-refund")
    turn_block(turn=refund, actor=operator, reason="holding until the ledger is reconciled")
    report = audit_unclaimed_blocked_turns(older_than=NOW, limit=100).as_dict()
    assert report["cleared"] == 1
    states = dict(Finding.objects.values_list("subject", "state"))
    assert states == {"t-charge": "acknowledged", "t-refund": "resolved", "": "open"}
