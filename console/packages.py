"""Recovery packages in the console: upload (verified and imported in the background), follow the
verification live, and export a run as a package (operators only: it carries raw bytes).

Nothing is verified inside a request: the upload is kept as received (recovery/packages/services.py) and the
``validate_package`` task checks it completely, then imports it as a run when it is accepted. The detail page
polls a small partial every second (htmx) while the task works, and stops once the upload reaches a final
state.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from journals.doors import run_for_write
from recovery.findings.models import Finding
from recovery.packages.doors import package_upload_for_read, package_upload_for_write
from recovery.packages.models import FINAL_STATES, IMPORTED, PackageUpload
from recovery.packages.selectors import package_uploads_visible
from recovery.packages.services import PackageError, package_upload_receive
from recovery.packages.services import package_requeue as requeue_package
from recovery.packages.services import run_export as run_export_package
from recovery.packages.views import export_filename

from .context import role_context
from .permissions import operator_required, viewer_required

RECENT = 20


@viewer_required
def packages(request: HttpRequest) -> HttpResponse:
    recent = list(package_uploads_visible(user=request.user).order_by("-created_at")[:RECENT])
    return render(
        request,
        "console/packages.html",
        {"nav": "packages", "form": UploadForm(), "recent": recent, **role_context(request)},
    )


@operator_required
def run_export(request: HttpRequest, pk: int) -> FileResponse:
    """The run's package, byte-for-byte journal included (contract section 8: the one raw export)."""
    run = run_for_write(actor=request.user, pk=pk)
    handle, path = tempfile.mkstemp(prefix="loopx-export-", suffix=".tar.gz")
    os.close(handle)
    run_export_package(run=run, out_path=path, actor=request.user)
    stream = open(path, "rb")  # noqa: SIM115  FileResponse closes it
    os.unlink(path)  # the open handle keeps the bytes readable; nothing is left on disk
    return FileResponse(
        stream, as_attachment=True, filename=export_filename(run.run_id, "tar.gz"), content_type="application/gzip"
    )


class UploadForm(forms.Form):
    package = forms.FileField(label="Package file (.tar, .tar.gz or .zip)")


@operator_required
@require_POST
def package_upload(request: HttpRequest) -> HttpResponse:
    form = UploadForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a package file to upload.")
        return HttpResponseRedirect(reverse("console:packages"))
    try:
        upload = package_upload_receive(file=form.cleaned_data["package"], actor=request.user)
    except PackageError as err:
        messages.error(request, f"The package was not kept: {err.detail}.")
        return HttpResponseRedirect(reverse("console:packages"))
    return HttpResponseRedirect(reverse("console:package", args=[upload.pk]))


# An unfinished upload whose row has not moved for this long has probably lost its task (a broker outage at
# publish time, or a worker that died): the page then offers to queue it again. A running check writes its
# progress twice a second, so a live one never looks stalled.
STALLED_AFTER = timedelta(seconds=60)


@dataclass
class KeptLine:
    """A journal line the import kept as evidence (docs/package-import.md, "Torn tails"): where it was, and
    the finding an operator resolves to repair it. Never its bytes: a torn line may hold a secret."""

    line: int
    offset: int
    size: int
    finding: int | None
    finding_url: str
    finding_state: str  # "open", "acknowledged", "resolved" or "" when the finding is not found


def finding_url(pk: int) -> str:
    """The findings page showing this one finding, whatever its state, with its resolve form."""
    return reverse("console:findings") + "?" + urlencode({"state": "all", "id": pk}) + f"#finding-{pk}"


def kept_lines(upload: PackageUpload) -> list[KeptLine]:
    """The import's ``result.corrupt_lines`` with each finding's state (one query, only when there are any)."""
    result = upload.result if isinstance(upload.result, dict) else {}
    raw = result.get("corrupt_lines") if upload.state == IMPORTED else None
    if not isinstance(raw, list) or not raw:
        return []
    entries = [e for e in raw if isinstance(e, dict)]
    ids = {e["finding"] for e in entries if isinstance(e.get("finding"), int)}
    states = dict(Finding.objects.filter(pk__in=ids).values_list("pk", "state")) if ids else {}
    out: list[KeptLine] = []
    for e in entries:
        pk = e.get("finding") if isinstance(e.get("finding"), int) else None
        out.append(
            KeptLine(
                line=int(e.get("line", 0)),
                offset=int(e.get("offset", 0)),
                size=int(e.get("size", 0)),
                finding=pk,
                finding_url=finding_url(pk) if pk is not None else "",
                finding_state=states.get(pk, "") if pk is not None else "",
            )
        )
    return out


def _status_context(upload: PackageUpload) -> dict[str, object]:
    unfinished = upload.state not in FINAL_STATES
    kept = kept_lines(upload)
    return {
        "upload": upload,
        "polling": unfinished,
        "stalled": unfinished and timezone.now() - upload.updated_at > STALLED_AFTER,
        "kept_lines": kept,
        "kept_unresolved": sum(1 for k in kept if k.finding_state != "resolved"),
    }


@viewer_required
def package_detail(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    upload = package_upload_for_read(actor=request.user, pk=pk)
    return render(
        request,
        "console/package_detail.html",
        {"nav": "packages", **_status_context(upload), **role_context(request)},
    )


@viewer_required
def package_status(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The partial the detail page polls while the upload is verified and imported."""
    upload = package_upload_for_read(actor=request.user, pk=pk)
    return render(request, "console/_package_status.html", {**_status_context(upload), **role_context(request)})


@operator_required
@require_POST
def package_requeue(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """Publish the upload's task again (a broker outage lost the first one). Always safe: the task's steps
    are compare-and-set on the upload's state, so a second delivery finds the work done."""
    upload = package_upload_for_write(actor=request.user, pk=pk)
    try:
        published = requeue_package(upload=upload, actor=request.user)
    except PackageError as err:
        messages.error(request, f"{err.detail[:1].upper()}{err.detail[1:]}.")
    else:
        if published:
            messages.success(request, "Queued again.")
        else:
            messages.error(request, "The task queue is unreachable; try again shortly.")
    return HttpResponseRedirect(reverse("console:package", args=[upload.pk]))
