"""Recovery packages in the console: export a run as a package (operators only: it carries raw bytes)."""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from journals.models import Run
from journals.selectors import journal_bytes
from journals.services import records_ingest
from loopx_site.ops.events import emit, package_rejected
from recovery.packages import Limits, PackageUsageError, build_package, check_package, restore_package
from recovery.services import assessment_refresh

from .permissions import operator_required, viewer_required


@viewer_required
def packages(request: HttpRequest) -> HttpResponse:
    from .views import _role_context

    recent = list(reversed(list(_reports(request).items())))
    return render(
        request,
        "console/packages.html",
        {"nav": "packages", "form": UploadForm(), "recent": recent, **_role_context(request)},
    )


def _filename(run_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:80].strip("._") or "run"
    return f"{safe}.loopx.tar.gz"


@operator_required
def run_export(request: HttpRequest, pk: int) -> HttpResponse:
    """The run's package, byte-for-byte journal included (contract section 8: the one raw export)."""
    run = get_object_or_404(Run, pk=pk)
    handle, path = tempfile.mkstemp(prefix="loopx-export-", suffix=".tar.gz")
    os.close(handle)
    build_package(path, run.run_id, journal_bytes(run=run))
    stream = open(path, "rb")
    os.unlink(path)  # the open handle keeps the bytes readable; nothing is left on disk
    return FileResponse(stream, as_attachment=True, filename=_filename(run.run_id), content_type="application/gzip")


# --- Upload, verify, import ------------------------------------------------------------------------
# The package is verified completely (recovery.packages.check_package) before anything is unpacked or
# stored; only an accepted package can be imported, and import re-verifies while it unpacks
# (restore_package). The upload is kept under LOOPX_PACKAGE_DIR/uploads, named by a random token that only
# the uploading session knows.

TOKEN_RE = re.compile(r"^[0-9a-f]{32}$")
SESSION_KEY = "loopx_packages"


def _limits() -> Limits:
    return Limits.from_settings(lambda name, default: getattr(settings, name, default))


def _upload_dir() -> Path:
    path = Path(settings.LOOPX_PACKAGE_DIR) / "uploads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _reports(request: HttpRequest) -> dict[str, Any]:
    return request.session.get(SESSION_KEY, {})


class UploadForm(forms.Form):
    package = forms.FileField(label="Package file (.tar, .tar.gz or .zip)")


@operator_required
@require_POST
def package_upload(request: HttpRequest) -> HttpResponse:
    form = UploadForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a package file to upload.")
        return HttpResponseRedirect(reverse("console:packages"))
    upload = form.cleaned_data["package"]
    if upload.size > settings.LOOPX_PACKAGE_MAX_TOTAL_BYTES:
        messages.error(request, "The file is larger than a package may be.")
        return HttpResponseRedirect(reverse("console:packages"))
    token = secrets.token_hex(16)
    path = _upload_dir() / f"{token}.pkg"
    with open(path, "wb") as fh:
        for chunk in upload.chunks():
            fh.write(chunk)
    try:
        report = check_package(path, _limits())
    except PackageUsageError as err:
        path.unlink(missing_ok=True)
        messages.error(request, f"The package cannot be read: {err}")
        return HttpResponseRedirect(reverse("console:packages"))
    if not report.accepted:
        path.unlink(missing_ok=True)  # a refused package is never kept, let alone unpacked
        # Issue 8: a rejected package is an operational event (webhooks, metrics); the upload token names
        # it, never the uploader's file name.
        emit(package_rejected, code=report.codes()[0], package=token, detail=f"{len(report.findings)} findings")
    reports = _reports(request)
    # The file's own name is the uploader's words: shown escaped, never used as a path.
    reports[token] = {"name": str(upload.name)[:200], "report": report.to_dict(), "imported": None}
    request.session[SESSION_KEY] = dict(list(reports.items())[-20:])
    return HttpResponseRedirect(reverse("console:package", args=[token]))


@viewer_required
def package_detail(request: HttpRequest, token: str) -> HttpResponse:
    entry = _reports(request).get(token) if TOKEN_RE.match(token) else None
    if entry is None:
        raise Http404("No such upload in this session.")
    from .views import _role_context

    return render(
        request,
        "console/package_detail.html",
        {"token": token, "entry": entry, "report": entry["report"], "nav": "packages", **_role_context(request)},
    )


@operator_required
@require_POST
def package_import(request: HttpRequest, token: str) -> HttpResponse:
    reports = _reports(request)
    entry = reports.get(token) if TOKEN_RE.match(token) else None
    path = _upload_dir() / f"{token}.pkg"
    if entry is None or not entry["report"]["accepted"] or not path.exists():
        raise Http404("No accepted upload to import.")
    with tempfile.TemporaryDirectory(dir=_upload_dir()) as scratch:
        target = Path(scratch) / "restored"
        report = restore_package(path, target, _limits())
        if not report.accepted:
            messages.error(request, "The package changed since it was checked; nothing was imported.")
            return HttpResponseRedirect(reverse("console:package", args=[token]))
        manifest = json.loads((target / "manifest.json").read_bytes())
        run_id = str(manifest["run"])
        run = _ingest_journal(run_id, target / "journal.jsonl")
    path.unlink(missing_ok=True)
    entry["imported"] = run_id
    request.session[SESSION_KEY] = reports
    messages.success(request, f"Imported run {run_id}: {run.record_count} records.")
    return HttpResponseRedirect(reverse("console:turns") + f"?run={quote(run_id, safe='')}&sort=run")


def _ingest_journal(run_id: str, journal: Path) -> Run:
    """Feed the journal through the store's ingest in batches it accepts, then assess it."""
    batch: list[bytes] = []
    size = 0
    run: Run | None = None
    max_records = settings.LOOPX_INGEST_MAX_BATCH_RECORDS
    max_bytes = settings.LOOPX_INGEST_MAX_BATCH_BYTES // 2
    with open(journal, "rb") as fh:
        for line in fh:
            batch.append(line)
            size += len(line)
            if len(batch) >= max_records or size >= max_bytes:
                run = _ingest(run_id, batch)
                batch, size = [], 0
    if batch:
        run = _ingest(run_id, batch)
    if run is None:
        raise Http404("The journal is empty.")
    assessment_refresh(run=run)
    return Run.objects.get(pk=run.pk)


def _ingest(run_id: str, lines: list[bytes]) -> Run:
    body = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    return records_ingest(run_id=run_id, body=body, content_type="application/x-ndjson", token=None).run
