"""Retention: old completed runs go to verified packages and leave the database; nothing else does; the
package re-imports through the ingest service to byte-identical records."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from journals.models import JournalRecord, Run
from journals.services import records_ingest
from ops import retention
from recovery.background import assessment_run
from recovery.packages import check_package
from tests.journal_builder import JournalBuilder
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def _store(builder: JournalBuilder, *, days_idle: int = 40, assess: bool = True) -> Run:
    records_ingest(run_id=builder.run, body=builder.body(), content_type="application/x-ndjson", token=None)
    run = Run.objects.get(run_id=builder.run)
    if assess:
        # As the worker's task does: lower the pending flag, then assess (recovery/background.py).
        assert assessment_run(run_id=run.run_id) == "stored"
    Run.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(days=days_idle))
    return Run.objects.get(pk=run.pk)


def _completed(run_id: str) -> JournalBuilder:
    from engine.types import DEFAULT_PHASES

    b = JournalBuilder(run_id)
    b.full_turn("t1")
    # A secret in a record: the package keeps the raw bytes (it is the operator's export), pages never do.
    b.plan("t2", credentials_note="none", api_key="sk-PLANTED-retention")
    b.commit("t2", *DEFAULT_PHASES)
    b.terminal("t2")
    return b


def _snapshot(run_id: str) -> list[tuple]:
    rows = JournalRecord.objects.filter(run__run_id=run_id).order_by("seq")
    return [
        (r.seq, r.branch, r.lsn, r.kind, r.v, r.turn, r.digest, bytes(r.line)) for r in rows
    ]


@pytest.fixture
def retention_dir(tmp_path, settings) -> Path:
    settings.LOOPX_RETENTION_DIR = tmp_path / "retention"
    return settings.LOOPX_RETENTION_DIR


def test_round_trip_export_remove_reimport(retention_dir):
    run = _store(_completed("old-done"))
    before = _snapshot("old-done")
    identity = (run.record_count, run.last_seq, run.prefix_digest)
    assert len(before) == run.record_count > 0

    report = retention.sweep(days=30)

    assert report.errors == {} and report.kept == {}
    [removed] = report.removed
    path = Path(removed["package"])
    assert path.parent == retention_dir and path.exists()
    assert removed["records"] == len(before)
    assert not Run.objects.filter(run_id="old-done").exists()
    assert JournalRecord.objects.count() == 0

    # The removal is audited, by the system, with the package's digest.
    action = OperatorAction.objects.get(kind="retention_remove")
    assert (action.actor, action.actor_name, action.run) == (None, "system:retention", None)
    assert action.after["sha256"] == removed["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert action.before["run"] == "old-done" and action.before["prefix_digest"] == run.prefix_digest
    assert check_package(path).accepted

    result = retention.reimport(path)
    assert (result["run"], result["stored"], result["duplicates"]) == ("old-done", len(before), 0)
    assert _snapshot("old-done") == before  # byte for byte, same seq, branch, lsn and digests
    again = Run.objects.get(run_id="old-done")
    assert (again.record_count, again.last_seq, again.prefix_digest) == identity
    # A second import is all duplicates: nothing changes.
    assert retention.reimport(path)["duplicates"] == len(before)
    assert _snapshot("old-done") == before


def test_only_finished_quiet_runs_go(retention_dir, operator):
    from recovery.findings.services import finding_open_or_touch
    from recovery.services import turn_block

    _store(_completed("recent"), days_idle=2)
    blocked = _completed("blocked-run")
    blocked._next_lsn[0] += 1  # a gap in the lsns: the run is blocked
    blocked.plan("t3")
    _store(blocked)
    turn_blocked = _completed("turn-blocked")
    turn_blocked.record("turn_planned", turn="t9")  # no lineage: this turn is blocked
    _store(turn_blocked)
    resumable = JournalBuilder("unfinished")
    resumable.plan("t1")
    resumable.commit("t1", "plan")
    _store(resumable)
    with_finding = _store(_completed("with-finding"))
    finding_open_or_touch(kind="lost_turn", run=with_finding, fact_key="t1")
    Run.objects.filter(pk=with_finding.pk).update(updated_at=timezone.now() - timedelta(days=40))
    acted_on = _store(_completed("acted-on"))
    turn_block(turn=acted_on.turns.get(turn_id="t1"), actor=operator, reason="looked wrong")
    _store(_completed("never-assessed"), assess=False)

    report = retention.sweep(days=30)

    assert report.removed == []
    assert report.kept == {
        "turn-blocked": "unresolved_turns",
        "unfinished": "unresolved_turns",
        "with-finding": "open_findings",
        "acted-on": "audit_trail",
    }
    # Not candidates at all: idle for too short a time, blocked, or not assessed through the last record.
    assert Run.objects.get(run_id="blocked-run").blocked_reason == "lsn_gap"
    assert {"recent", "blocked-run", "never-assessed"}.isdisjoint(report.kept)
    assert Run.objects.count() == 7
    assert not retention_dir.exists() or not any(retention_dir.iterdir())  # nothing even exported


def test_rows_retention_does_not_know_keep_the_run(retention_dir):
    """A model retention was not written for (here the console's annotations) keeps the run whole."""
    from console.models import TurnAnnotation

    run = _store(_completed("annotated"))
    TurnAnnotation.objects.create(turn=run.turns.get(turn_id="t1"), notes="keep an eye on this")
    report = retention.sweep(days=30)
    assert (report.removed, report.kept) == ([], {"annotated": "referenced_by:console.turnannotation"})
    assert JournalRecord.objects.filter(run=run).count() == run.record_count


def test_record_arriving_during_export_aborts_removal(retention_dir, monkeypatch):
    run = _store(_completed("busy"))
    real_export = retention.export_run

    def export_then_ingest(run_obj, directory=None):
        exported = real_export(run_obj, directory)
        late = _completed("busy")
        late.plan("t3")  # a new record after the export was written (the rest are duplicates)
        records_ingest(run_id="busy", body=late.body(), content_type="application/x-ndjson", token=None)
        return exported

    monkeypatch.setattr(retention, "export_run", export_then_ingest)
    report = retention.sweep(days=30)
    assert report.removed == [] and report.kept == {"busy": "records arrived during the export"}
    assert list(retention_dir.iterdir()) == []  # the stale package was not left behind
    assert JournalRecord.objects.filter(run=run).count() == run.record_count + 1
    assert not OperatorAction.objects.filter(kind="retention_remove").exists()


def test_unverified_package_keeps_the_run(retention_dir, monkeypatch, published_events):
    from recovery.packages import PackageReport

    run = _store(_completed("bad-export"))

    def refuse(path, limits=None):
        report = PackageReport(format="tar.gz")
        report.add("checksum_mismatch", "journal.jsonl", "the bytes differ from the manifest")
        return report

    monkeypatch.setattr("ops.retention.check_package", refuse)
    report = retention.sweep(days=30)
    assert report.kept == {"bad-export": "package failed verification: checksum_mismatch"}
    assert list(retention_dir.iterdir()) == []
    assert JournalRecord.objects.filter(run=run).count() == run.record_count
    assert published_events == [("checksum_mismatch", "bad-export")]


@pytest.fixture
def published_events():
    from kernel import events

    seen: list[tuple[str, str]] = []

    def receiver(code: str = "", run_id: str = "", **_):
        seen.append((code, run_id))

    events.package_rejected.connect(receiver, weak=False, dispatch_uid="test-retention-rejected")
    yield seen
    events.package_rejected.disconnect(dispatch_uid="test-retention-rejected")


def test_off_by_default(retention_dir, settings):
    settings.LOOPX_RETENTION_DAYS = 0
    _store(_completed("old-done"))
    report = retention.sweep()
    assert (report.enabled, report.removed) == (False, [])
    out = io.StringIO()
    call_command("retention_sweep", stdout=out)
    assert "retention is off" in out.getvalue()
    assert Run.objects.filter(run_id="old-done").exists()


def test_beat_task_and_command_follow_the_setting(retention_dir, settings):
    from ops.tasks import retention_sweep

    settings.LOOPX_RETENTION_DAYS = 30
    _store(_completed("a"))
    _store(_completed("b"))
    out = io.StringIO()
    call_command("retention_sweep", "--dry-run", "--json", stdout=out)
    dry = json.loads(out.getvalue())
    assert sorted(item["run"] for item in dry["removed"]) == ["a", "b"] and Run.objects.count() == 2
    result = retention_sweep()
    assert sorted(item["run"] for item in result["removed"]) == ["a", "b"]
    assert Run.objects.count() == 0
    assert OperatorAction.objects.filter(kind="retention_remove").count() == 2


@pytest.mark.postgres
def test_trigger_still_refuses_other_deletes_and_all_updates():
    run = _store(_completed("guarded"))
    table = JournalRecord._meta.db_table
    with connection.cursor() as cursor:
        with pytest.raises(IntegrityError), transaction.atomic():
            cursor.execute(f"DELETE FROM {table} WHERE run_id = %s", [run.pk])
        with pytest.raises(IntegrityError), transaction.atomic():
            cursor.execute("SELECT set_config('loopx.retention', 'on', true)")
            cursor.execute(f"UPDATE {table} SET kind = 'x' WHERE run_id = %s", [run.pk])
        # The flag is transaction-local: gone once that transaction ended.
        with pytest.raises(IntegrityError), transaction.atomic():
            cursor.execute(f"DELETE FROM {table} WHERE run_id = %s", [run.pk])
    assert JournalRecord.objects.filter(run=run).count() == run.record_count
