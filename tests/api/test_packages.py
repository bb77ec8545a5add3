"""The package API: POST /api/v1/packages answers 202 at once (the task verifies and imports), GET
/api/v1/packages/{id} follows it, and GET /api/v1/runs/{run}/export hands operators the raw package."""

from __future__ import annotations

import gzip
import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from journals.models import JournalRecord, Run
from journals.selectors import journal_bytes
from journals.services import records_ingest
from recovery.models import PackageUpload
from recovery.packages import build_package
from recovery.tasks import validate_package
from tests.journal_builder import JournalBuilder
from tests.personas import make_runtime

pytestmark = pytest.mark.django_db

SECRET = "sk-live-API-PACKAGE-SECRET-77"


@pytest.fixture(autouse=True)
def package_dir(settings, tmp_path):
    settings.LOOPX_PACKAGE_DIR = tmp_path / "packages"
    return settings.LOOPX_PACKAGE_DIR




def package_bytes(tmp_path, run: str = "api-run-1", fmt: str = "tar.gz") -> bytes:
    b = JournalBuilder(run)
    b.full_turn("t1")
    b.plan("t2")
    b.dispatch("t2", "charge", effect_class="unsafe", api_key=SECRET)
    path = tmp_path / f"p.{fmt}"
    build_package(path, run, b.body(), fmt=fmt)
    return path.read_bytes()


def multipart(client, data: bytes):
    return client.post("/api/v1/packages", {"package": SimpleUploadedFile("p.tar.gz", data)}, format="multipart")


def test_an_operator_uploads_and_follows_the_import(
    operator_client, tmp_path, eager_tasks, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = multipart(operator_client, package_bytes(tmp_path))
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["state"] == "received"  # the answer does not wait for the task
    assert response["Location"] == body["status_url"]
    assert body["status_url"].endswith(f"/api/v1/packages/{body['id']}")
    status = operator_client.get(body["status_url"]).json()
    assert status["state"] == "imported" and status["run"] == "api-run-1"
    assert status["run_url"].endswith("/api/v1/runs/api-run-1")
    assert status["progress"] == {"done": status["size"], "total": status["size"], "percent": 100}
    assert status["findings"] == [] and status["format"] == "tar.gz" and status["members"] == 2
    assert status["result"]["stored"] == JournalRecord.objects.count() > 0
    assert status["uploader"] == "olivia-operator" and status["name"] == "p.tar.gz"
    assert SECRET not in response.content.decode() + str(status)


def test_a_runtime_token_uploads_the_raw_body_and_only_it_reads_the_status(tmp_path, viewer_client, no_broker):
    runtime = make_runtime("uploader")
    response = runtime.client.generic(
        "POST", "/api/v1/packages", package_bytes(tmp_path), content_type="application/gzip"
    )
    assert response.status_code == 202, response.content
    upload = PackageUpload.objects.get()
    assert upload.token == runtime.token and upload.uploader is None and upload.uploader_name == "token:uploader"
    assert upload.original_name == ""
    url = f"/api/v1/packages/{upload.pk}"
    assert runtime.client.get(url).json()["state"] == "received"
    assert make_runtime("someone-else").client.get(url).status_code == 404  # not this token's upload
    assert viewer_client.get(url).status_code == 200  # people with the viewer role follow every upload
    assert viewer_client.get("/api/v1/packages/6f0d1e8c-0000-4000-8000-000000000000").status_code == 404


@pytest.mark.parametrize("content_type", ["application/octet-stream", "application/zip", "application/x-tar"])
def test_the_raw_body_is_recognised_by_content_not_by_type(operator_client, tmp_path, content_type, no_broker):
    data = package_bytes(tmp_path, fmt="zip")
    response = operator_client.generic("POST", "/api/v1/packages", data, content_type=content_type)
    assert response.status_code == 202
    validate_package(response.json()["id"])
    assert operator_client.get(response.json()["status_url"]).json()["format"] == "zip"


def test_viewers_and_strangers_cannot_upload_and_nothing_is_kept(
    viewer_client, outsider_client, client, tmp_path, package_dir, no_broker
):
    data = package_bytes(tmp_path)
    assert multipart(viewer_client, data).status_code == 403
    assert outsider_client.generic("POST", "/api/v1/packages", data, content_type="application/gzip").status_code == 403
    assert client.generic("POST", "/api/v1/packages", data, content_type="application/gzip").status_code in (401, 403)
    assert PackageUpload.objects.count() == 0 and no_broker == []
    assert not (package_dir / "uploads").exists() or list((package_dir / "uploads").iterdir()) == []


def test_refusals_before_anything_is_kept(operator_client, settings, package_dir, no_broker):
    settings.LOOPX_PACKAGE_MAX_TOTAL_BYTES = 100
    too_big = operator_client.generic("POST", "/api/v1/packages", b"x" * 101, content_type="application/gzip")
    assert too_big.status_code == 413 and too_big.json()["error"] == "package_too_large"
    empty = operator_client.generic("POST", "/api/v1/packages", b"", content_type="application/gzip")
    assert empty.status_code == 400 and empty.json()["error"] == "package_missing"
    no_file = operator_client.post("/api/v1/packages", {"other": "x"}, format="multipart")
    assert no_file.status_code == 400
    json_body = operator_client.post("/api/v1/packages", {"a": 1}, format="json")
    assert json_body.status_code == 415
    assert PackageUpload.objects.count() == 0 and no_broker == []


def test_a_rejected_upload_shows_findings_and_nothing_else(operator_client, viewer_client, no_broker):
    response = operator_client.generic(
        "POST", "/api/v1/packages", b"not an archive at all", content_type="application/gzip"
    )
    validate_package(response.json()["id"])
    status = viewer_client.get(response.json()["status_url"]).json()
    assert status["state"] == "rejected" and status["run"] is None and status["run_url"] is None
    assert [f["code"] for f in status["findings"]] == ["unsupported_format"]
    assert Run.objects.count() == 0


# --- Export ---------------------------------------------------------------------------------------------


@pytest.fixture
def stored_run(db) -> Run:
    b = JournalBuilder("exp-run-1")
    b.full_turn("t1")
    b.dispatch("t1", "call", api_key=SECRET)
    return records_ingest(run_id="exp-run-1", body=b.body(), content_type="application/x-ndjson", token=None).run


def _journal_in_tar_gz(data: bytes) -> bytes:
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        member = tf.extractfile("journal.jsonl")
        assert member is not None
        return member.read()


def test_operators_export_the_raw_package(operator_client, stored_run):
    response = operator_client.get("/api/v1/runs/exp-run-1/export", HTTP_ACCEPT="application/gzip")
    assert response.status_code == 200 and response["Content-Type"] == "application/gzip"
    assert response["Content-Disposition"] == 'attachment; filename="exp-run-1.loopx.tar.gz"'
    import hashlib

    assert response["X-Package-Sha256"] == hashlib.sha256(response.content).hexdigest()
    journal = _journal_in_tar_gz(response.content)
    assert journal == journal_bytes(run=stored_run) and SECRET.encode() in journal  # raw: the one place
    assert gzip.decompress(response.content)  # a well-formed gzip stream
    as_zip = operator_client.get("/api/v1/runs/exp-run-1/export?format=zip")
    assert as_zip["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(as_zip.content)) as zf:
        assert zf.read("journal.jsonl") == journal
    assert operator_client.get("/api/v1/runs/exp-run-1/export?format=tar").status_code == 400
    assert operator_client.get("/api/v1/runs/nope/export").status_code == 404


def test_only_operators_export(viewer_client, outsider_client, client, stored_run):
    runtime = make_runtime("exporter")
    for who in (viewer_client, outsider_client, runtime.client):
        response = who.get("/api/v1/runs/exp-run-1/export")
        assert response.status_code == 403 and SECRET.encode() not in response.content
    assert client.get("/api/v1/runs/exp-run-1/export").status_code in (401, 403)
