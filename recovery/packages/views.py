"""The package API: upload a recovery package (verified and imported in the background), follow its status,
and export a run as a package.

- ``POST /api/v1/packages``: a multipart form (field ``package``) or the raw file as the body. An operator or
  a runtime token. Answers 202 at once with the upload's id and status URL; the ``validate_package`` task
  does the rest (recovery/packages/services.py).
- ``GET /api/v1/packages/{id}``: state, progress, findings, and the run once imported. Viewers, and the
  runtime token that uploaded it.
- ``GET /api/v1/runs/{run}/export``: the run's package, built from the store. Operators only: the one answer
  that carries raw bytes, secrets included (contract section 8).
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import CanExportRaw, CanRunRecovery, CanView
from journals.api import ErrorSerializer, LoopxView
from journals.models import Run
from journals.views import API_ERRORS
from recovery.packages.doors import package_upload_for_read
from recovery.packages.models import PackageUpload
from recovery.packages.serializers import PackageUploadSerializer
from recovery.packages.services import PackageError, package_upload_receive, run_export

# Room for the multipart framing around the file (boundaries, part headers, a field or two).
_MULTIPART_SLACK = 64 * 1024


class _RawPackage:
    """The request body as a stream, handed to the service unread: it is copied to disk in pieces, never held
    whole in memory."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.name = ""

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size) if self.stream is not None else b""


class _RawPackageParser(BaseParser):
    # request.data is whatever parse returns; the stubs only allow a mapping.
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> _RawPackage:  # type: ignore[override]
        return _RawPackage(stream)


# A package is recognised by its content, never by its name or declared type; these are the types a client
# is likely to send it as.
class OctetStreamParser(_RawPackageParser):
    media_type = "application/octet-stream"


class GzipParser(_RawPackageParser):
    media_type = "application/gzip"


class TarParser(_RawPackageParser):
    media_type = "application/x-tar"


class ZipParser(_RawPackageParser):
    media_type = "application/zip"


_BINARY = {"type": "string", "format": "binary"}
_MULTIPART = {
    "type": "object",
    "properties": {"package": {**_BINARY, "description": "The package file (.tar, .tar.gz or .zip)."}},
    "required": ["package"],
}
_TOO_LARGE = {413: OpenApiResponse(ErrorSerializer, description="Larger than a package may be; nothing kept.")}
_UPLOAD_ERRORS = {code: API_ERRORS[code] for code in (400, 401, 403)}
_NO_UPLOAD = {404: OpenApiResponse(ErrorSerializer, description="No such upload (or not this token's).")}


class PackageUploadView(LoopxView):
    """Upload a recovery package: kept (never unpacked), then verified and imported by a background task."""

    permission_classes = [CanRunRecovery]
    parser_classes = [MultiPartParser, OctetStreamParser, GzipParser, TarParser, ZipParser]
    serializer_class = PackageUploadSerializer
    queryset = PackageUpload.objects.none()

    @extend_schema(
        operation_id="packages_upload",
        request={
            "multipart/form-data": _MULTIPART,
            "application/octet-stream": _BINARY,
            "application/gzip": _BINARY,
            "application/x-tar": _BINARY,
            "application/zip": _BINARY,
        },
        responses={
            202: OpenApiResponse(
                PackageUploadSerializer, description="Received: follow `status_url` while it is verified."
            ),
            **_TOO_LARGE,
            **_UPLOAD_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        limit = int(settings.LOOPX_PACKAGE_MAX_TOTAL_BYTES)
        multipart = (request.content_type or "").lower().startswith("multipart/")
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isdigit() and int(declared) > limit + (_MULTIPART_SLACK if multipart else 0):
            # Refused before a byte of it is read.
            error = PackageError(413, "package_too_large", f"the file is larger than a package may be ({limit} bytes)")
            return Response(error.as_dict(), status=413)
        data = request.data
        if multipart:
            file = request.FILES.get("package") or request.FILES.get("file")
        else:
            file = data if isinstance(data, _RawPackage) else None
        if file is None:
            error = PackageError(400, "package_missing", "send the package as the body or as the form field `package`")
            return Response(error.as_dict(), status=400)
        upload = package_upload_receive(file=file, actor=request.user)
        body = PackageUploadSerializer(upload, context=self.get_serializer_context()).data
        return Response(body, status=202, headers={"Location": body["status_url"]})


class PackageDetailView(LoopxView):
    """An upload's status. A runtime token sees only its own uploads; a person, their own and those of the
    runs they see (recovery.packages.doors)."""

    permission_classes = [CanView]
    serializer_class = PackageUploadSerializer
    queryset = PackageUpload.objects.none()

    @extend_schema(
        operation_id="packages_retrieve", responses={200: PackageUploadSerializer, **_UPLOAD_ERRORS, **_NO_UPLOAD}
    )
    def get(self, request: Request, upload_id: uuid.UUID) -> Response:
        upload = package_upload_for_read(actor=request.user, pk=upload_id)
        return Response(PackageUploadSerializer(upload, context=self.get_serializer_context()).data)


class _AnyAccept(BaseContentNegotiation):
    """The export answers with the package whatever the client accepts (a downloader may ask for
    application/gzip); refusals are JSON."""

    # DRF passes the view's lists (get_parsers, get_renderers); the stubs say any iterable.
    def select_parser(self, request: Request, parsers: list[BaseParser]) -> BaseParser | None:  # type: ignore[override]
        return parsers[0] if parsers else None

    def select_renderer(  # type: ignore[override]
        self, request: Request, renderers: list[Any], format_suffix: str | None = None
    ) -> Any:
        return renderers[0], renderers[0].media_type


EXPORT_TYPES = {"tar.gz": "application/gzip", "zip": "application/zip"}


def export_filename(run_id: str, fmt: str) -> str:
    """A file name made of the run id's safe characters only (the run id is the runtime's words)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:80].strip("._") or "run"
    return f"{safe}.loopx.{fmt}"


class RunExportView(LoopxView):
    """The run as a recovery package, built from the store (``build_package``): journal byte for byte."""

    permission_classes = [CanExportRaw]
    content_negotiation_class = _AnyAccept
    queryset = Run.objects.none()  # for the schema's path parameter only

    @extend_schema(
        operation_id="run_export",
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=list(EXPORT_TYPES),
                default="tar.gz",
                description="Compressed forms only: the package holds raw bytes, secrets included.",
            )
        ],
        responses={
            (200, "application/gzip"): OpenApiResponse(OpenApiTypes.BINARY, description="The package (tar.gz)."),
            (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY, description="The package (zip)."),
            **API_ERRORS,
        },
    )
    def get(self, request: Request, run_id: str) -> HttpResponse:
        run = self.get_run(request, run_id)
        fmt = request.query_params.get("format", "tar.gz")
        if fmt not in EXPORT_TYPES:
            error = PackageError(400, "format_invalid", f"format must be one of {', '.join(EXPORT_TYPES)}")
            return Response(error.as_dict(), status=400)
        with tempfile.TemporaryDirectory(prefix="loopx-export-") as scratch:
            path = Path(scratch) / "package"
            sha = run_export(run=run, out_path=path, fmt=fmt, actor=request.user)
            data = path.read_bytes()
        response = HttpResponse(data, content_type=EXPORT_TYPES[fmt])
        response["Content-Disposition"] = f'attachment; filename="{export_filename(run.run_id, fmt)}"'
        response["X-Package-Sha256"] = sha
        return response
