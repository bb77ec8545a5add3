"""Packages in the console: a hostile upload is refused with its findings and nothing is kept; an
exported run imports back through verification, ingest and assessment."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from journals.models import JournalRecord, Run

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


def test_a_hostile_package_is_refused_with_its_findings(op_pages, settings, tmp_path):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    upload = SimpleUploadedFile("evil.tar.gz", hostile_package(), content_type="application/gzip")
    response = op_pages.post(reverse("console:package_upload"), {"package": upload})
    assert response.status_code == 302
    html = op_pages.get(response["Location"]).content.decode()
    assert "Refused" in html
    assert "path traversal" in html and "link member" in html
    assert "Import the run" not in html
    assert list((tmp_path / "uploads").iterdir()) == []  # nothing kept, nothing unpacked


def test_an_exported_run_imports_back(op_pages, pay, settings, tmp_path):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    exported = b"".join(op_pages.get(reverse("console:run_export", args=[pay.run.pk])).streaming_content)
    records = JournalRecord.objects.filter(run=pay.run).count()
    upload = SimpleUploadedFile("pay.tar.gz", exported, content_type="application/gzip")
    detail = op_pages.get(op_pages.post(reverse("console:package_upload"), {"package": upload})["Location"])
    html = detail.content.decode()
    assert "Accepted" in html and "Import the run" in html
    token = detail.context["token"]
    response = op_pages.post(reverse("console:package_import", args=[token]))
    assert response.status_code == 302 and "run=pay-run-1" in response["Location"]
    assert JournalRecord.objects.filter(run=pay.run).count() == records  # the same bytes: duplicates
    assert Run.objects.count() == 1


def test_viewers_cannot_upload_or_import(viewer_pages, settings, tmp_path):
    settings.LOOPX_PACKAGE_DIR = tmp_path
    upload = SimpleUploadedFile("evil.tar.gz", hostile_package())
    assert viewer_pages.post(reverse("console:package_upload"), {"package": upload}).status_code == 403
    assert viewer_pages.post(reverse("console:package_import", args=["0" * 32])).status_code == 403
    assert not (tmp_path / "uploads").exists()
