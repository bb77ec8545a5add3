"""A package whose journal has a torn tail (or another line that is not one complete JSON object) imports
every complete record through the store's ingest service and keeps the torn line, verbatim, as evidence:
the run is blocked with `storage_corruption` until an operator repairs it (resolves its finding, audited).
The bytes are never lost, never guessed at, and never shown (contract sections 1 and 8)."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from journals.models import JournalRecord, PendingAssessment, Run, Turn
from journals.selectors import journal_bytes
from journals.services import records_ingest
from kernel.appendonly import AppendOnlyError
from recovery.findings.models import Finding
from recovery.findings.services import finding_acknowledge, finding_resolve
from recovery.models import Assessment, PackageUpload, TurnAssessment
from recovery.output import assessment_output_read
from recovery.packages import build_package, check_package, restore_package
from recovery.packages.models import JournalCorruption
from recovery.packages.services import MAX_CORRUPT_LINES, package_sweep, run_journal_bytes
from recovery.selectors import HOLD
from recovery.services import assessment_refresh, turn_decision
from recovery.tasks import assess_run, validate_package
from tests.journal_builder import JournalBuilder
from tests.packages.test_import import package_dir, run_task  # noqa: F401 - package_dir: an autouse fixture
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

RUN = "imp-run-1"
TORN_SECRET = "TORN-SECRET-0077"
# A write cut off mid-record, after a secret field: never to be quoted anywhere.
TORN = b'{"v":2,"run":"' + RUN.encode() + b'","branch":0,"token":"' + TORN_SECRET.encode() + b'","ls'


def journal() -> JournalBuilder:
    """A clean run (no violation of its own): a finished turn and one that resumes, with a secret field."""
    b = JournalBuilder(RUN)
    b.full_turn("t1")
    b.plan("t2")
    b.commit("t2", "plan", "envelope")
    b.dispatch("t2", "lookup", effect_class="safe", api_key="sk-live-CLEAN-SECRET")
    return b


@pytest.fixture(autouse=True)
def published(monkeypatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(validate_package, "apply_async", lambda args=None, **_: sent.append(args[0]))
    monkeypatch.setattr(assess_run, "apply_async", lambda args=None, **_: sent.append(f"assess:{args[0]}"))
    return sent


@pytest.fixture
def imported(operator, tmp_path, django_capture_on_commit_callbacks):
    """Build a package of ``body``, upload it as the operator and run the task; returns the upload."""
    from recovery.packages.services import package_upload_receive

    count = 0

    def run(body: bytes, fmt: str = "tar.gz") -> PackageUpload:
        nonlocal count
        count += 1
        package = tmp_path / f"p{count}.{fmt}"
        build_package(package, RUN, body, fmt=fmt)
        assert check_package(package).accepted  # a torn tail is evidence, not a reason to refuse (docs/packages.md)
        with django_capture_on_commit_callbacks(execute=True):
            upload = package_upload_receive(file=package.read_bytes(), actor=operator)
        with django_capture_on_commit_callbacks(execute=True):
            return run_task(upload)

    return run


def decisions(run: Run) -> dict[str, tuple[str, str | None]]:
    assessment = assessment_refresh(run=run)
    return {t["turn"]: (t["decision"], t["reason"]) for t in assessment_output_read(assessment=assessment)["turns"]}


# --- The torn tail is kept, the records are stored, the run is blocked -----------------------------------


@pytest.mark.parametrize("fmt", ("tar", "tar.gz", "zip"))
def test_a_torn_tail_imports_every_complete_record_and_keeps_the_tail_verbatim(fmt, imported, published):
    complete = journal().body()
    upload = imported(complete + TORN, fmt)
    assert upload.state == "imported", upload.result
    records = complete.count(b"\n")
    run = Run.objects.get(run_id=RUN)
    assert journal_bytes(run=run) == complete  # every complete record, through ingest, byte for byte
    kept = JournalCorruption.objects.get()
    assert bytes(kept.data) == TORN and kept.size == len(TORN) and not kept.terminated
    assert kept.offset == len(complete) and kept.line_no == records + 1
    assert kept.after_seq == run.last_seq and kept.ordinal == 0 and kept.upload_id == upload.pk
    assert upload.result == {
        "records": records,
        "stored": records,
        "duplicates": 0,
        "batches": 1,
        "corrupt_lines": [
            {"line": records + 1, "offset": len(complete), "size": len(TORN), "finding": kept.finding_id}
        ],
    }
    # An open finding names it and blocks the run at the gate.
    finding = Finding.objects.get()
    assert finding == kept.finding and finding.kind == "storage_corruption" and finding.state == "open"
    assert finding.blocks_run and finding.turn is None
    assert finding.evidence["package"] == str(upload.pk) and finding.evidence["offset"] == len(complete)
    assert f"assess:{RUN}" in published  # the import asked for an assessment


def test_the_run_is_blocked_with_storage_corruption_on_every_turn(imported):
    imported(journal().body() + TORN)
    run = Run.objects.get(run_id=RUN)
    assert decisions(run) == {"t1": ("blocked", "storage_corruption"), "t2": ("blocked", "storage_corruption")}
    output = assessment_output_read(assessment=Assessment.objects.filter(run=run).latest())
    codes = [v["code"] for v in output["violations"]]
    assert codes == ["storage_corruption"]
    assert output["records"] == journal().body().count(b"\n")  # the torn line is not a record
    run.refresh_from_db()
    assert run.blocked_reason == "storage_corruption"
    for turn in Turn.objects.filter(run=run):
        assert turn_decision(turn=turn).gate == HOLD  # no approval covers a run-level violation
    # The torn line is read after the stored records, so line N is still the record with seq N for the pages,
    # and the reason's line names no stored record.
    rows = TurnAssessment.objects.filter(assessment=Assessment.objects.filter(run=run).latest())
    assert {row.reason_line for row in rows} == {run.last_seq + 1}
    assert not JournalRecord.objects.filter(run=run, seq=run.last_seq + 1).exists()


def test_the_torn_bytes_are_never_shown_or_logged(imported, viewer_client, operator_client, caplog):
    caplog.set_level(logging.DEBUG)
    upload = imported(journal().body() + TORN)
    run = Run.objects.get(run_id=RUN)
    assessment = assessment_refresh(run=run)
    answers = [
        viewer_client.get(f"/api/v1/packages/{upload.pk}"),
        viewer_client.get(f"/api/v1/runs/{RUN}"),
        viewer_client.get(f"/api/v1/runs/{RUN}/turns"),
        viewer_client.get(f"/api/v1/runs/{RUN}/records"),
        viewer_client.get(f"/api/v1/runs/{RUN}/assessments/{assessment.pk}"),
        operator_client.get(f"/api/v1/runs/{RUN}/turns/t2/decision"),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.content
        assert TORN_SECRET.encode() not in answer.content
        assert TORN not in answer.content and TORN[-24:] not in answer.content  # nor the torn line's bytes
    assert TORN_SECRET not in json.dumps(Finding.objects.get().evidence)
    assert TORN_SECRET not in json.dumps(assessment_output_read(assessment=assessment))
    assert TORN_SECRET not in json.dumps(upload.result)
    assert TORN_SECRET not in caplog.text
    assert TORN_SECRET not in str(JournalCorruption.objects.get())


# --- Ingest's rules hold ---------------------------------------------------------------------------------


def test_the_same_package_imported_again_keeps_one_tail_and_stores_nothing(imported):
    body = journal().body() + TORN
    first = imported(body)
    second = imported(body)
    assert second.state == "imported"
    assert second.result["stored"] == 0 and second.result["duplicates"] == first.result["records"]
    kept = JournalCorruption.objects.get()  # the same line at the same place: one row, one finding
    assert second.result["corrupt_lines"][0]["finding"] == kept.finding_id
    finding = Finding.objects.get()
    assert finding.seen_count == 2 and finding.state == "open"


def test_a_tail_added_to_a_run_already_stored_blocks_it_though_its_prefix_did_not_move(imported):
    complete = journal().body()
    records_ingest(run_id=RUN, body=complete, content_type="application/x-ndjson", token=None)
    run = Run.objects.get(run_id=RUN)
    before = assessment_refresh(run=run)
    assert before.blocked_reason is None
    PendingAssessment.objects.filter(run=run).update(pending=False)
    upload = imported(complete + TORN)
    assert upload.result["stored"] == 0  # only duplicates: ingest raised no flag ...
    assert PendingAssessment.objects.get(run=run).pending  # ... the kept tail did
    run.refresh_from_db()
    after = assessment_refresh(run=run)
    assert after.pk != before.pk and after.prefix_key == before.prefix_key
    assert after.blocked_reason == "storage_corruption"


def test_repairing_a_tail_added_to_an_assessed_run_clears_it_and_the_sweep_rests(
    imported, operator, published, django_capture_on_commit_callbacks
):
    # The run was assessed clean before the tail arrived: the repair must not fall back to that older
    # assessment (the run's latest would stay the blocked one, and the sweep would ask again forever).
    complete = journal().body()
    records_ingest(run_id=RUN, body=complete, content_type="application/x-ndjson", token=None)
    run = Run.objects.get(run_id=RUN)
    clean = assessment_refresh(run=run)
    assert clean.blocked_reason is None
    imported(complete + TORN)
    run.refresh_from_db()
    blocked = assessment_refresh(run=run)
    assert blocked.blocked_reason == "storage_corruption"
    assert set(decisions(run).values()) == {("blocked", "storage_corruption")}
    finding_resolve(finding=Finding.objects.get(), actor=operator, reason="the runtime died mid-write")
    PendingAssessment.objects.filter(run=run).update(pending=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert package_sweep().reassessed == [RUN]
    assert published[-1] == f"assess:{RUN}"
    assess_run.run(RUN)  # what the published task does
    repaired = Assessment.objects.filter(run=run).latest("id")
    assert repaired.pk not in (clean.pk, blocked.pk) and repaired.blocked_reason is None
    turns = Turn.objects.filter(run=run).values_list("turn_id", "decision", "reason")
    assert set(turns) == {("t1", "complete", None), ("t2", "resume", None)}  # what the pages and API show
    assert assessment_refresh(run=run).pk == repaired.pk  # the same inputs: the same assessment
    assert package_sweep().reassessed == []


def _kept_probes(reads: CaptureQueriesContext) -> int:
    """The statements that only ask whether any corrupt line is kept for the run."""
    return sum(1 for q in reads.captured_queries if "recovery_journalcorruption" in q["sql"] and "LIMIT 1" in q["sql"])


def test_the_probes_read_with_the_run_name_the_same_inputs_as_the_plain_reads(imported, operator):
    # The worker reads the run's row with two probes and skips the reads they say are empty; whatever they
    # say must give the inputs (and so the identity) the plain reads give: no line kept, one kept and in
    # force, the same line resolved.
    from recovery.services import _run_probed, assessment_inputs

    def agree(kept_any: bool) -> None:
        run, probes = _run_probed(Run.objects.get(run_id=RUN).pk)
        assert probes.kept_any is kept_any and probes.repair_pk is None
        with CaptureQueriesContext(connection) as probed_reads:
            probed = assessment_inputs(run=run, probes=probes)
        with CaptureQueriesContext(connection) as plain_reads:
            plain = assessment_inputs(run=run)
        assert (probed.kept, probed.repair, probed.identity) == (plain.kept, plain.repair, plain.identity)
        # What the probe said is not asked again: the plain read asks whether any line is kept first.
        assert _kept_probes(plain_reads) == 1 and _kept_probes(probed_reads) == 0

    complete = journal().body()
    records_ingest(run_id=RUN, body=complete, content_type="application/x-ndjson", token=None)
    agree(kept_any=False)
    imported(complete + TORN)
    agree(kept_any=True)
    finding_resolve(finding=Finding.objects.get(), actor=operator, reason="the runtime died mid-write")
    agree(kept_any=True)  # a resolved line is still kept, marked out of force


def test_a_conflicting_package_with_a_torn_tail_keeps_nothing(imported):
    b = journal()
    records_ingest(run_id=RUN, body=b.body(), content_type="application/x-ndjson", token=None)
    other = journal()
    other.lines[-1] = other.lines[-1].replace(b'"lookup"', b'"search"')  # other bytes at a stored lsn
    upload = imported(other.body() + TORN)
    assert upload.state == "import_failed" and upload.result["error"] == "lsn_conflict"
    assert upload.result["line"] == len(other.lines)
    assert not JournalCorruption.objects.exists() and not Finding.objects.exists()


def test_refusal_line_numbers_stay_the_journals_with_corrupt_lines_skipped(imported):
    b = journal()
    lines = list(b.lines)
    lines.insert(1, b"")  # an empty line: storage_corruption, kept
    lines.append(b'{"v":2,"branch":0,"lsn":99,"kind":"turn_planned"}')  # no run: ingest refuses it
    upload = imported(b.body(lines))
    assert upload.state == "import_failed" and upload.result["error"] == "envelope_invalid"
    assert upload.result["line"] == len(lines)
    assert not Run.objects.exists() and not JournalCorruption.objects.exists()


def test_a_corrupt_line_inside_the_journal_is_kept_at_its_place(imported, tmp_path):
    b = journal()
    lines = list(b.lines)
    lines.insert(3, b'{"v":2,"run":"imp-run-1","kind":NaN}')
    lines.insert(4, b"")
    body = b.body(lines)
    upload = imported(body)
    assert upload.state == "imported", upload.result
    kept = list(JournalCorruption.objects.order_by("ordinal"))
    assert [(k.line_no, k.ordinal, k.after_seq, k.terminated) for k in kept] == [(4, 0, 3, True), (5, 1, 3, True)]
    run = Run.objects.get(run_id=RUN)
    assert run.record_count == len(b.lines)
    assert set(decisions(run).values()) == {("blocked", "storage_corruption")}
    assert run_journal_bytes(run=run) == body  # each at its place: the export gives the journal back


def test_too_many_corrupt_lines_fail_the_import_typed(imported):
    body = journal().body() + b"\n" * (MAX_CORRUPT_LINES + 1)
    upload = imported(body)
    assert upload.state == "import_failed" and upload.result["error"] == "too_many_corrupt_lines"
    assert not Run.objects.exists() and not JournalCorruption.objects.exists()


# --- Export and repair -----------------------------------------------------------------------------------


def test_export_gives_back_the_journal_with_its_torn_tail_byte_for_byte(imported, tmp_path):
    body = journal().body() + TORN
    imported(body)
    out = tmp_path / "out.tar.gz"
    call_command("export_run", RUN, "--out", str(out), stdout=io.StringIO())
    restore_package(out, tmp_path / "restored")
    assert (tmp_path / "restored" / "journal.jsonl").read_bytes() == body
    again = imported(body)  # and the export imports into the same run as duplicates and the same tail
    assert again.result["stored"] == 0 and JournalCorruption.objects.count() == 1


def test_the_operator_repairs_by_resolving_the_finding_and_the_bytes_stay(
    imported, operator, published, django_capture_on_commit_callbacks
):
    body = journal().body() + TORN
    imported(body)
    run = Run.objects.get(run_id=RUN)
    assert set(decisions(run).values()) == {("blocked", "storage_corruption")}
    finding = Finding.objects.get()
    finding_acknowledge(finding=finding, actor=operator, reason="looking at the torn write")
    assert set(decisions(run).values()) == {("blocked", "storage_corruption")}  # acknowledged still blocks
    finding_resolve(finding=finding, actor=operator, reason="the runtime died mid-write; the tail is dropped")
    action = OperatorAction.objects.filter(kind="finding_resolve").get()  # the repair is audited
    assert action.actor == operator and action.run == run
    # Resolving asks for no assessment: the next sweep does, so that the run's pages follow.
    published.clear()
    PendingAssessment.objects.filter(run=run).update(pending=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert package_sweep().reassessed == [RUN]
    assert published == [f"assess:{RUN}"]
    # The journal as repaired: the engine decides the turns again (the gate refreshes on its own).
    assert decisions(run) == {"t1": ("complete", None), "t2": ("resume", None)}
    assert package_sweep().reassessed == []  # assessed since the repair: nothing more to ask
    assert run_journal_bytes(run=run) == journal_bytes(run=run)  # the repaired journal is exported
    kept = JournalCorruption.objects.get()
    assert bytes(kept.data) == TORN  # never lost
    with pytest.raises(AppendOnlyError):
        kept.save()
    with pytest.raises(AppendOnlyError):
        JournalCorruption.objects.filter(pk=kept.pk).delete()
    with pytest.raises(AppendOnlyError):
        JournalCorruption.objects.filter(pk=kept.pk).update(data=b"{}")


def test_the_same_tail_imported_after_a_repair_blocks_again(imported, operator):
    body = journal().body() + TORN
    imported(body)
    finding_resolve(finding=Finding.objects.get(), actor=operator, reason="dropped the tail")
    imported(body)
    run = Run.objects.get(run_id=RUN)
    assert JournalCorruption.objects.count() == 2
    assert Finding.objects.filter(state="open").count() == 1
    assert set(decisions(run).values()) == {("blocked", "storage_corruption")}


@pytest.mark.postgres
def test_postgresql_refuses_to_rewrite_or_delete_a_kept_line(imported):
    from django.db import connection, transaction
    from django.db.utils import IntegrityError

    imported(journal().body() + TORN)
    kept = JournalCorruption.objects.get()
    for sql in (
        "UPDATE recovery_journalcorruption SET data = '\\x7b7d'::bytea WHERE id = %s",
        "DELETE FROM recovery_journalcorruption WHERE id = %s",
    ):
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [kept.pk])
    assert bytes(JournalCorruption.objects.get().data) == TORN
