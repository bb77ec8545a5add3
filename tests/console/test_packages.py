"""Packages in the console: an upload is kept and verified in the background (never inside the request);
the detail page polls its status; a hostile upload is refused with its findings and nothing is kept; an
exported run imports back through verification, ingest and assessment."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from journals.models import JournalRecord, Run
from recovery.models import PackageUpload
from recovery.packages import build_package
from recovery.tasks import validate_package
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db


def hostile_package() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b'{"format": "loopx-recovery-package"}'
        info = tarfile.TarInfo("../../etc/cron.d/evil")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("state/link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    return buf.getvalue()




def _upload(client, name: str, data: bytes, capture) -> object:
    with capture(execute=True):  # the task is published once the upload's row is committed
        return client.post(reverse("console:package_upload"), {"package": SimpleUploadedFile(name, data)})


def test_a_hostile_package_is_refused_with_its_findings(
    op_pages, settings, tmp_path, eager_tasks, django_capture_on_commit_callbacks
):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    response = _upload(op_pages, "evil.tar.gz", hostile_package(), django_capture_on_commit_callbacks)
    assert response.status_code == 302
    html = op_pages.get(response["Location"]).content.decode()
    assert "Refused" in html
    assert "path traversal" in html and "link member" in html
    assert "hx-trigger=\"every" not in html  # final: the page stops polling
    upload = PackageUpload.objects.get()
    assert upload.state == "rejected" and upload.stored_name == ""
    assert list((tmp_path / "uploads").iterdir()) == []  # nothing kept, nothing unpacked
    assert Run.objects.count() == 0 and JournalRecord.objects.count() == 0


def test_the_upload_is_not_verified_in_the_request_and_the_page_polls(op_pages, settings, tmp_path, no_broker):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    data = hostile_package()  # (its gzip header carries the time: made once)
    response = op_pages.post(reverse("console:package_upload"), {"package": SimpleUploadedFile("evil.tar.gz", data)})
    upload = PackageUpload.objects.get()
    assert upload.state == "received" and upload.findings == []  # nothing checked yet
    assert (tmp_path / upload.stored_name).read_bytes() == data  # kept as received
    html = op_pages.get(response["Location"]).content.decode()
    status = reverse("console:package_status", args=[upload.pk])
    assert f'hx-get="{status}"' in html and 'hx-trigger="every 1s"' in html
    assert "waiting for a worker" in html

    validate_package(str(upload.pk))  # what the worker does with the message
    partial = op_pages.get(status).content.decode()
    assert 'id="package-status"' in partial and "hx-trigger" not in partial
    assert "Refused" in partial and "path traversal" in partial


def test_an_exported_run_imports_back(
    op_pages, pay, settings, tmp_path, eager_tasks, django_capture_on_commit_callbacks
):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    exported = b"".join(op_pages.get(reverse("console:run_export", args=[pay.run.pk])).streaming_content)
    records = JournalRecord.objects.filter(run=pay.run).count()
    response = _upload(op_pages, "pay.tar.gz", exported, django_capture_on_commit_callbacks)
    detail = op_pages.get(response["Location"])
    html = detail.content.decode()
    assert "Accepted and imported as run" in html and "pay-run-1" in html
    assert "run=pay-run-1" in html  # the link to the run's turns
    upload = PackageUpload.objects.get()
    assert upload.state == "imported" and upload.run_ident == "pay-run-1"
    assert upload.result == {"records": records, "stored": 0, "duplicates": records, "batches": 1}
    assert JournalRecord.objects.filter(run=pay.run).count() == records  # the same bytes: duplicates
    assert Run.objects.count() == 1
    assert list((tmp_path / "uploads").iterdir()) == []  # imported: the bytes are not kept


def test_the_task_run_twice_imports_once(op_pages, settings, tmp_path, no_broker):
    """A redelivered message (acks_late) runs the real task function again: one run, one import."""
    settings.LOOPX_PACKAGE_DIR = tmp_path
    b = JournalBuilder("fresh-run")
    b.full_turn("t1")
    b.plan("t2")
    build_package(tmp_path / "fresh.tar.gz", "fresh-run", b.body())
    package = SimpleUploadedFile("fresh.tar.gz", (tmp_path / "fresh.tar.gz").read_bytes())
    op_pages.post(reverse("console:package_upload"), {"package": package})
    upload = PackageUpload.objects.get()
    assert validate_package(str(upload.pk)) == "imported"
    run = Run.objects.get(run_id="fresh-run")
    first = list(JournalRecord.objects.filter(run=run).order_by("seq").values_list("seq", "digest"))
    assert len(first) == len(b.lines)
    assert validate_package(str(upload.pk)) == "imported"  # the second delivery finds the work done
    assert Run.objects.filter(run_id="fresh-run").count() == 1
    assert list(JournalRecord.objects.filter(run=run).order_by("seq").values_list("seq", "digest")) == first
    upload.refresh_from_db()
    assert upload.checks == 1 and upload.result["stored"] == len(first)
    html = op_pages.get(reverse("console:package", args=[upload.pk])).content.decode()
    assert 'id="imported-run"' in html and "fresh-run" in html


def test_viewers_cannot_upload_or_requeue(viewer_pages, operator, settings, tmp_path):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    upload = SimpleUploadedFile("evil.tar.gz", hostile_package())
    assert viewer_pages.post(reverse("console:package_upload"), {"package": upload}).status_code == 403
    assert not (tmp_path / "uploads").exists()
    assert PackageUpload.objects.count() == 0
    kept = PackageUpload.objects.create(sha256="0" * 64, size=1, progress_total=1, uploader_name="x")
    assert viewer_pages.post(reverse("console:package_requeue", args=[kept.pk])).status_code == 403
    # Viewers follow uploads all the same.
    assert viewer_pages.get(reverse("console:package", args=[kept.pk])).status_code == 200
    assert "Queue again" not in viewer_pages.get(reverse("console:package", args=[kept.pk])).content.decode()


def test_a_stalled_upload_can_be_queued_again(op_pages, operator, no_broker):
    from datetime import timedelta

    from django.utils import timezone

    upload = PackageUpload.objects.create(
        sha256="0" * 64, size=1, progress_total=1, uploader=operator, uploader_name=operator.username
    )
    detail = reverse("console:package", args=[upload.pk])
    assert "Queue again" not in op_pages.get(detail).content.decode()  # just received: give the worker time
    PackageUpload.objects.filter(pk=upload.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    assert "Queue again" in op_pages.get(detail).content.decode()
    response = op_pages.post(reverse("console:package_requeue", args=[upload.pk]))
    assert response.status_code == 302 and no_broker == [str(upload.pk)]
    PackageUpload.objects.filter(pk=upload.pk).update(state="rejected")
    op_pages.post(reverse("console:package_requeue", args=[upload.pk]))
    assert no_broker == [str(upload.pk)]  # a finished upload is not queued again
