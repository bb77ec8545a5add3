"""Recovery packages in the console: export a run as a package (operators only: it carries raw bytes)."""

from __future__ import annotations

import os
import re
import tempfile

from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from journals.models import Run
from journals.selectors import journal_bytes
from recovery.packages import build_package

from .permissions import operator_required, viewer_required


@viewer_required
def packages(request: HttpRequest) -> HttpResponse:
    from .views import _role_context

    return render(request, "console/packages.html", {"nav": "packages", **_role_context(request)})


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
