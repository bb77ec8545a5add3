"""Importing an uploaded package into the dashboard (recovery/packages/services.py): verified completely in the
background, imported as a run through the store's ingest service when accepted, and nothing created when it
is refused. Runs the real services and the real task function; no broker (publishes are recorded)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from journals.models import Branch, JournalRecord, Run, Turn
from journals.selectors import journal_bytes
from journals.services import records_ingest
from kernel import events
from recovery.models import Assessment, PackageUpload
from recovery.packages import build_package, check_package, restore_package
from recovery.packages import services as package_services
from recovery.packages.services import package_import, package_upload_receive, package_validate
from recovery.tasks import validate_package
from tests.journal_builder import JournalBuilder
from tests.packages.crafting import E, make_archive, manifest_bytes, package_entries
from trail.tokens import api_token_create

pytestmark = pytest.mark.django_db

SECRET = "sk-live-IMPORT-SECRET-0042"
FORMATS = ("tar", "tar.gz", "zip")


@pytest.fixture(autouse=True)
def package_dir(settings, tmp_path) -> Path:
    settings.LOOPX_PACKAGE_DIR = tmp_path / "packages"
    return settings.LOOPX_PACKAGE_DIR


@pytest.fixture(autouse=True)
def published(monkeypatch) -> list[str]:
    """validate_package publishes, recorded instead of sent (the tests run the task body themselves)."""
    sent: list[str] = []
    monkeypatch.setattr(validate_package, "apply_async", lambda args=None, **_: sent.append(args[0]))
    return sent


@pytest.fixture
def rejected_events() -> list[dict]:
    seen: list[dict] = []

    def receiver(sender, **kwargs):
        seen.append(kwargs)

    events.package_rejected.connect(receiver, weak=False)
    yield seen
    events.package_rejected.disconnect(receiver)


def journal(run: str = "imp-run-1") -> JournalBuilder:
    """A run with a finished turn, an unsafe dispatch carrying a secret, a non-canonical line and a fork."""
    b = JournalBuilder(run)
    b.full_turn("t1")
    b.plan("t2")
    b.commit("t2", "plan", "envelope", "dispatch")
    b.dispatch("t2", "charge", effect_class="unsafe", api_key=SECRET)
    # Foreign formatting (spaces, key order, a CR before the newline): stored and exported as received.
    b.raw(
        b'{"run": "' + run.encode() + b'", "v": 2, "lsn": ' + str(len(b.lines)).encode() + b', "branch": 0, '
        b'"kind": "phase_committed", "turn": "t2", "phase": "execute", "at": "2026-01-01T00:01:00Z"}\r'
    )
    return b


@pytest.fixture
def upload_of(django_capture_on_commit_callbacks):
    """Receive bytes as an upload; the publish that follows the commit is recorded by ``published``."""

    def receive(data: bytes, actor) -> PackageUpload:
        with django_capture_on_commit_callbacks(execute=True):
            return package_upload_receive(file=data, actor=actor)

    return receive


def run_task(upload: PackageUpload) -> PackageUpload:
    validate_package(str(upload.pk))
    upload.refresh_from_db()
    return upload


def nothing_stored() -> None:
    assert Run.objects.count() == 0
    assert JournalRecord.objects.count() == 0
    assert Turn.objects.count() == 0 and Branch.objects.count() == 0 and Assessment.objects.count() == 0


# --- Round trip -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_journal_imports_and_exports_back_byte_for_byte(fmt, operator, tmp_path, published, upload_of):
    original = journal().body()
    package = tmp_path / f"in.{fmt}"
    build_package(package, "imp-run-1", original, {"notes.json": b"{}"}, fmt=fmt)
    upload = upload_of(package.read_bytes(), operator)
    assert published == [str(upload.pk)]
    upload = run_task(upload)
    assert upload.state == "imported", upload.result
    assert upload.format == fmt and upload.member_count == 3 and upload.findings == []
    run = Run.objects.get(run_id="imp-run-1")
    lines = original.count(b"\n")
    assert upload.result == {"records": lines, "stored": lines, "duplicates": 0, "batches": 1}
    assert journal_bytes(run=run) == original  # the store holds exactly the package's journal

    # export_run -> check -> restore: the same bytes come back out.
    out = tmp_path / f"out.{fmt}"
    call_command("export_run", "imp-run-1", "--out", str(out), "--format", fmt, stdout=io.StringIO())
    assert check_package(out).accepted
    restore_package(out, tmp_path / "restored")
    assert (tmp_path / "restored" / "journal.jsonl").read_bytes() == original
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # raw bytes, secrets included: the owner's only


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_exported_run_imports_into_itself_as_duplicates(fmt, operator, tmp_path, upload_of):
    run = records_ingest(run_id="imp-run-1", body=journal().body(), content_type="application/x-ndjson", token=None).run
    stored = list(JournalRecord.objects.filter(run=run).order_by("seq").values_list("seq", "digest", "line"))
    out = tmp_path / f"export.{fmt}"
    call_command("export_run", "imp-run-1", "--out", str(out), "--format", fmt, stdout=io.StringIO())
    restore_package(out, tmp_path / "restored")
    assert (tmp_path / "restored" / "journal.jsonl").read_bytes() == b"".join(bytes(r[2]) + b"\n" for r in stored)
    upload = run_task(upload_of(out.read_bytes(), operator))
    assert upload.state == "imported"
    assert upload.result["stored"] == 0 and upload.result["duplicates"] == len(stored)
    assert list(JournalRecord.objects.order_by("seq").values_list("seq", "digest", "line")) == stored


def test_export_run_replaces_a_file_atomically_and_refuses_an_unknown_run(operator, tmp_path):
    records_ingest(run_id="imp-run-1", body=journal().body(), content_type="application/x-ndjson", token=None)
    out = tmp_path / "export.tar.gz"
    out.write_bytes(b"an older export")
    sink = tmp_path / "stdout"
    with open(sink, "w") as fh:
        call_command("export_run", "imp-run-1", "--out", str(out), stdout=fh)
    summary = json.loads(sink.read_text())
    assert summary["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert summary["run"] == "imp-run-1" and summary["format"] == "tar.gz"
    assert check_package(out).accepted
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    with pytest.raises(CommandError, match="no such run"):
        call_command("export_run", "nope", "--out", str(tmp_path / "x.tar.gz"))
    with pytest.raises(CommandError, match="does not exist"):
        call_command("export_run", "imp-run-1", "--out", str(tmp_path / "missing" / "x.tar.gz"))


# --- Refusals -------------------------------------------------------------------------------------------


def test_a_rejected_package_creates_nothing_and_keeps_its_findings(operator, package_dir, rejected_events, upload_of):
    entries = package_entries(run="imp-run-1", journal_data=journal().body())
    entries.append(E("../escape", b"x"))
    entries.append(E("state/link", kind="symlink", target="/etc/passwd"))
    upload = run_task(upload_of(make_archive("tar.gz", entries), operator))
    assert upload.state == "rejected"
    codes = {f["code"] for f in upload.findings}
    assert {"path_traversal", "link_member"} <= codes
    nothing_stored()
    assert upload.stored_name == "" and list((package_dir / "uploads").iterdir()) == []
    assert upload.run_ident is None and upload.result == {}
    # Announced once, by the upload's id, never by its file name.
    assert [e["package"] for e in rejected_events] == [str(upload.pk)]
    # A redelivery changes nothing and announces nothing again.
    assert validate_package(str(upload.pk)) == "rejected"
    assert len(rejected_events) == 1


def test_a_package_that_is_not_an_archive_is_refused(operator, upload_of):
    upload = run_task(upload_of(b"just some text, not a package\n", operator))
    assert upload.state == "rejected" and upload.findings[0]["code"] == "unsupported_format"
    nothing_stored()


def test_findings_never_quote_secrets(operator, viewer_client, upload_of):
    # The journal carries a secret; the manifest lies about it: a checksum and size mismatch.
    data = journal().body()
    files = [("journal.jsonl", data[:-10])]
    entries = [E("manifest.json", manifest_bytes(files, run="imp-run-1")), E("journal.jsonl", data)]
    upload = run_task(upload_of(make_archive("zip", entries), operator))
    assert upload.state == "rejected"
    assert {f["code"] for f in upload.findings} == {"size_mismatch", "checksum_mismatch"}
    assert SECRET not in json.dumps(upload.findings)
    answer = viewer_client.get(f"/api/v1/packages/{upload.pk}")
    assert answer.status_code == 200 and SECRET.encode() not in answer.content
    nothing_stored()


def test_a_stored_upload_that_changed_is_refused(operator, package_dir, tmp_path, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)
    other = tmp_path / "q.tar.gz"
    build_package(other, "imp-run-1", journal().body(), {"added.json": b"{}"})  # a valid package, other bytes
    (package_dir / upload.stored_name).write_bytes(other.read_bytes())
    upload = run_task(upload)
    assert upload.state == "rejected" and upload.findings[0]["code"] == "upload_changed"
    nothing_stored()


def test_a_check_out_of_time_refuses_the_package(operator, tmp_path, monkeypatch, upload_of):
    from celery.exceptions import SoftTimeLimitExceeded

    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)

    def too_slow(*args, **kwargs):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(package_services, "check_package", too_slow)
    upload = run_task(upload)
    assert upload.state == "rejected" and upload.findings[0]["code"] == "check_timed_out"
    nothing_stored()


def test_an_unexpected_error_in_the_check_refuses_the_package(operator, tmp_path, monkeypatch, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)

    def broken(*args, **kwargs):
        raise RuntimeError("a verifier bug a hostile archive found")

    monkeypatch.setattr(package_services, "check_package", broken)
    assert validate_package(str(upload.pk)) == "rejected"  # not retried into the same bug, not left checking
    upload.refresh_from_db()
    assert upload.findings[0]["code"] == "check_failed" and "verifier bug" not in json.dumps(upload.findings)
    nothing_stored()


@pytest.mark.parametrize(("raised", "error"), [("timeout", "import_timed_out"), ("bug", "import_error")])
def test_an_import_cut_short_fails_typed_and_stores_nothing(
    operator, tmp_path, monkeypatch, upload_of, raised, error, settings
):
    from celery.exceptions import SoftTimeLimitExceeded

    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)
    ingest = package_services.records_ingest
    calls: list[int] = []

    def second_batch_fails(**kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise SoftTimeLimitExceeded() if raised == "timeout" else RuntimeError("boom")
        return ingest(**kwargs)

    settings.LOOPX_INGEST_MAX_BATCH_RECORDS = 5
    monkeypatch.setattr(package_services, "records_ingest", second_batch_fails)
    assert validate_package(str(upload.pk)) == "import_failed"
    upload.refresh_from_db()
    assert upload.result["error"] == error
    nothing_stored()  # the first batch was rolled back with the rest


def test_a_bogus_task_argument_is_missing_not_an_error():
    assert validate_package("not-a-uuid") == "missing"
    assert validate_package("6f0d1e8c-0000-4000-8000-000000000000") == "missing"


# --- Import rules (the same as ingest's) ----------------------------------------------------------------


def test_importing_the_same_package_twice_changes_nothing_the_second_time(operator, tmp_path, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    first = run_task(upload_of(package.read_bytes(), operator))
    assert first.state == "imported" and first.result["stored"] > 0
    before = list(JournalRecord.objects.order_by("seq").values_list("seq", "digest"))
    run = Run.objects.get()
    second = run_task(upload_of(package.read_bytes(), operator))
    assert second.state == "imported" and second.run_ident == "imp-run-1"
    assert second.result["stored"] == 0 and second.result["duplicates"] == len(before)
    assert list(JournalRecord.objects.order_by("seq").values_list("seq", "digest")) == before
    assert Run.objects.get().prefix_digest == run.prefix_digest


def test_the_task_delivered_twice_imports_once(operator, tmp_path, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)
    assert validate_package(str(upload.pk)) == "imported"
    records = JournalRecord.objects.count()
    assert validate_package(str(upload.pk)) == "imported"
    upload.refresh_from_db()
    assert upload.checks == 1 and upload.result["stored"] == records
    assert Run.objects.count() == 1 and JournalRecord.objects.count() == records
    # The services are compare-and-set on their own, too.
    assert package_validate(upload=upload).state == "imported"
    assert package_import(upload=upload, actor=operator).state == "imported"
    assert JournalRecord.objects.count() == records


def test_a_worker_that_died_mid_check_is_resumed_by_the_redelivery(operator, tmp_path, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)
    PackageUpload.objects.filter(pk=upload.pk).update(state="checking", checks=1)  # then SIGKILL
    upload = run_task(upload)
    assert upload.state == "imported" and upload.checks == 2


def test_a_conflicting_package_is_a_typed_failure_and_stores_nothing(operator, tmp_path, settings, upload_of):
    # The store has the run's first records; the package has other bytes at lsn 5 and more after it.
    stored = journal()
    records_ingest(
        run_id="imp-run-1", body=stored.body(stored.lines[:6]), content_type="application/x-ndjson", token=None
    )
    before = list(JournalRecord.objects.order_by("seq").values_list("seq", "digest"))
    conflicting = stored.lines[:5] + [stored.lines[5].replace(b'"phase":"', b'"phase":"x-')] + stored.lines[6:]
    assert conflicting[5] != stored.lines[5]
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", b"".join(line + b"\n" for line in conflicting))
    # Small batches: the conflict is in the third batch, after two that ingest alone would have stored.
    settings.LOOPX_INGEST_MAX_BATCH_RECORDS = 2
    upload = run_task(upload_of(package.read_bytes(), operator))
    assert upload.state == "import_failed"
    assert upload.result["error"] == "lsn_conflict" and upload.result["line"] == 6
    assert upload.result["branch"] == 0 and upload.result["lsn"] == 5
    assert upload.run_ident == "imp-run-1" and upload.findings == []
    assert list(JournalRecord.objects.order_by("seq").values_list("seq", "digest")) == before
    assert SECRET not in json.dumps(upload.result)
    assert upload.stored_name == ""


def test_a_conflict_in_a_later_batch_leaves_a_new_run_uncreated(operator, tmp_path, settings, upload_of):
    b = journal()
    lines = b.lines + [b.lines[3].replace(b'"phase":"', b'"phase":"y-')]  # lsn 3 again, other bytes
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", b"".join(line + b"\n" for line in lines))
    settings.LOOPX_INGEST_MAX_BATCH_RECORDS = 3
    upload = run_task(upload_of(package.read_bytes(), operator))
    assert upload.state == "import_failed" and upload.result["error"] == "lsn_conflict"
    assert upload.result["line"] == len(lines)
    nothing_stored()


# A torn tail imports, kept as evidence that blocks the run: tests/packages/test_torn_tail.py.


def test_a_runtime_token_imports_only_runs_its_prefix_allows(tmp_path, upload_of):
    token, _ = api_token_create(name="rt", run_prefix="other-")
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = run_task(upload_of(package.read_bytes(), token))
    assert upload.uploader_name == "token:rt"
    assert upload.state == "import_failed" and upload.result["error"] == "run_forbidden"
    nothing_stored()


def test_a_person_imports_only_runs_of_their_teams(red_operator, tmp_path, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = run_task(upload_of(package.read_bytes(), red_operator))
    assert upload.state == "import_failed" and upload.result["error"] == "run_forbidden"
    nothing_stored()
    build_package(package, "red-imp-1", journal("red-imp-1").body())
    assert run_task(upload_of(package.read_bytes(), red_operator)).state == "imported"


def test_an_uploader_who_lost_the_operator_role_imports_nothing(operator, tmp_path, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)
    operator.groups.clear()
    upload = run_task(upload)
    assert upload.state == "import_failed" and upload.result["error"] == "import_forbidden"
    nothing_stored()


def test_an_import_raises_the_assessment_flag_as_ingest_does(
    operator, tmp_path, django_capture_on_commit_callbacks, upload_of, monkeypatch
):
    from journals.models import PendingAssessment
    from recovery.tasks import assess_run

    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = upload_of(package.read_bytes(), operator)
    sent: list[str] = []
    monkeypatch.setattr(assess_run, "apply_async", lambda args=None, **_: sent.append(args[0]))
    with django_capture_on_commit_callbacks(execute=True):
        run_task(upload)
    assert sent == ["imp-run-1"]
    assert PendingAssessment.objects.get(run__run_id="imp-run-1").pending


# --- Progress -------------------------------------------------------------------------------------------


def test_progress_advances_while_the_package_is_read(operator, tmp_path, monkeypatch, upload_of):
    package = tmp_path / "p.zip"
    state = {f"part-{n}.bin": os.urandom(200_000) for n in range(6)}
    build_package(package, "imp-run-1", journal().body(), state, fmt="zip")
    upload = upload_of(package.read_bytes(), operator)
    written: list[tuple[int, int, str]] = []
    store = package_services._store_progress

    def spy(pk, done, total):
        store(pk, done, total)
        row = PackageUpload.objects.get(pk=pk)
        written.append((row.progress_done, row.progress_total, row.state))

    monkeypatch.setattr(package_services, "_store_progress", spy)
    monkeypatch.setattr(package_services, "PROGRESS_INTERVAL", 0.0)
    upload.refresh_from_db()
    assert (upload.progress_done, upload.progress_total, upload.percent) == (0, upload.size, 0)
    package_validate(upload=upload, progress_interval=0.0)
    dones = [d for d, _, _ in written]
    assert len(dones) >= 6 and dones == sorted(dones) and len(set(dones)) == len(dones)
    assert all(total == upload.size and state == "checking" for _, total, state in written)
    assert 0 < dones[0] < upload.size
    upload.refresh_from_db()
    assert upload.state == "accepted" and upload.progress_done == upload.size and upload.percent == 100


# --- Receiving ------------------------------------------------------------------------------------------


def test_an_upload_is_kept_as_received_and_never_unpacked(operator, package_dir, tmp_path, published, upload_of):
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    data = package.read_bytes()
    upload = upload_of(data, operator)
    assert upload.state == "received" and upload.sha256 == hashlib.sha256(data).hexdigest()
    assert upload.size == len(data) and upload.uploader == operator and upload.uploader_name == operator.username
    kept = package_dir / upload.stored_name
    assert kept.read_bytes() == data and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert sorted(p.name for p in (package_dir / "uploads").iterdir()) == [kept.name]  # nothing beside it
    nothing_stored()


def test_an_upload_over_the_size_limit_is_refused_with_nothing_kept(operator, package_dir, settings, upload_of):
    settings.LOOPX_PACKAGE_MAX_TOTAL_BYTES = 1000
    with pytest.raises(package_services.PackageError) as refused:
        upload_of(b"x" * 1001, operator)
    assert refused.value.status == 413
    assert PackageUpload.objects.count() == 0 and list((package_dir / "uploads").iterdir()) == []
    with pytest.raises(package_services.PackageError):
        upload_of(b"", operator)
    assert PackageUpload.objects.count() == 0 and list((package_dir / "uploads").iterdir()) == []


def test_the_state_and_progress_are_constrained_in_the_database(operator):
    from django.db import IntegrityError, transaction

    upload = PackageUpload.objects.create(sha256="0" * 64, size=10, progress_total=10, uploader_name="x")
    for change in ({"state": "unpacked"}, {"progress_done": 11}, {"format": "rar"}, {"state": "imported"}):
        with pytest.raises(IntegrityError), transaction.atomic():
            PackageUpload.objects.filter(pk=upload.pk).update(**change)


def test_an_import_leaves_no_scratch_and_clears_a_dead_workers(operator, package_dir, tmp_path, upload_of):
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid whose process has exited: a worker killed mid-import
    uploads = package_dir / "uploads"
    uploads.mkdir(parents=True)
    leftover = uploads / f".import.loopx-restore.{gone.pid}.1.0123abcd"
    (leftover / "restored").mkdir(parents=True)
    (leftover / "restored" / "journal.jsonl").write_bytes(b"half an import")
    package = tmp_path / "p.tar.gz"
    build_package(package, "imp-run-1", journal().body())
    upload = run_task(upload_of(package.read_bytes(), operator))
    assert upload.state == "imported"
    assert list(uploads.iterdir()) == []  # the dead worker's tree, the scratch tree and the upload: all gone
