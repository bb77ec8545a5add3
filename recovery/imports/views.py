"""The import API: upload another runtime's history (converted and stored as runs in the background),
follow it, and read where an imported run and its intents' classes came from.

- ``POST /api/v1/imports``: multipart (``file``, ``source``, optional ``run``, ``effect_map``, ``key``). A
  runtime token or an operator. 202 with the new import; 200 with the existing one for the same bytes (one
  the uploader may see); 400 (the importer's code) or 409 ``import_conflict`` with nothing stored. A run
  outside the uploader's teams answers as a missing run (404; a token: 403 ``run_forbidden``).
- ``GET /api/v1/imports/{id}``: state, progress, source, runs. Viewers, and the token that uploaded it.
- ``GET /api/v1/runs/{run}/import``: the import that stored a run (404 for a run that was not imported).
- ``GET /api/v1/runs/{run}/turns/{turn}/intent-classes``: which map entry decided each intent's class.
"""

from __future__ import annotations

import uuid

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import CanRunRecovery, CanView
from journals.api import ErrorSerializer, LoopxView
from journals.views import API_ERRORS
from recovery.imports.doors import history_import_for_read
from recovery.imports.models import HistoryImport
from recovery.imports.selectors import imported_run_of, intent_class_sources
from recovery.imports.serializers import HistoryImportSerializer, ImportUploadSerializer, IntentClassSerializer
from recovery.imports.services import ImportServiceError, history_upload_receive

_UPLOAD_ERRORS = {code: API_ERRORS[code] for code in (401, 403)}


def import_queryset() -> object:
    return HistoryImport.objects.select_related("source", "map_version__map").defer("source__data")


class ImportUploadView(LoopxView):
    """Upload a history: read once at the door (refused typed with nothing stored when it is not one), then
    converted and stored as runs by a background task."""

    permission_classes = [CanRunRecovery]
    parser_classes = [MultiPartParser]
    serializer_class = HistoryImportSerializer
    queryset = HistoryImport.objects.none()

    @extend_schema(
        operation_id="imports_upload",
        request={"multipart/form-data": ImportUploadSerializer},
        responses={
            202: OpenApiResponse(HistoryImportSerializer, description="Kept: follow `status_url` while it converts."),
            200: OpenApiResponse(
                HistoryImportSerializer, description="These bytes were imported already: that import."
            ),
            400: OpenApiResponse(
                ErrorSerializer,
                description="Not a history of that source (the importer's code, e.g. `history_invalid`), an unknown "
                "source or map; nothing stored.",
            ),
            404: OpenApiResponse(
                ErrorSerializer,
                description="The run is outside the uploader's teams, as a missing run answers; nothing stored.",
            ),
            409: OpenApiResponse(
                ErrorSerializer, description="`import_conflict`: the run exists from other bytes; nothing stored."
            ),
            413: OpenApiResponse(ErrorSerializer, description="Larger than a history may be; nothing stored."),
            **_UPLOAD_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        form = ImportUploadSerializer(data=request.data)
        if not form.is_valid():
            missing = "file" in form.errors or "source" in form.errors
            code = "import_missing" if missing else "invalid_request"
            error = ImportServiceError(400, code, "send the history as `file` and its system as `source`")
            return Response({**error.as_dict(), "fields": form.errors}, status=400)
        data = form.validated_data
        if data.get("run"):
            # Another team's run, existing or not, answers as a missing run does (journals.api).
            self.check_run_allowed(request, data["run"].strip())
        try:
            upload, created = history_upload_receive(
                file=data["file"],
                source=data["source"],
                actor=request.user,
                run=data.get("run") or None,
                effect_map=data.get("effect_map") or None,
                source_key=data.get("key") or "",
            )
        except ImportServiceError as err:
            if err.status == 404:  # a run the history itself names, outside the uploader's teams
                raise NotFound(err.detail) from None
            raise
        upload = import_queryset().get(pk=upload.pk)  # type: ignore[attr-defined]
        body = HistoryImportSerializer(upload, context=self.get_serializer_context()).data
        return Response(body, status=202 if created else 200, headers={"Location": body["status_url"]})


class ImportDetailView(LoopxView):
    """An import's status. A runtime token sees only its own imports; people with the viewer role see all."""

    permission_classes = [CanView]
    serializer_class = HistoryImportSerializer
    queryset = HistoryImport.objects.none()

    @extend_schema(
        operation_id="imports_retrieve",
        responses={
            200: HistoryImportSerializer,
            **_UPLOAD_ERRORS,
            404: OpenApiResponse(ErrorSerializer, description="No such import (or not this token's)."),
        },
    )
    def get(self, request: Request, import_id: uuid.UUID) -> Response:
        upload = history_import_for_read(actor=request.user, pk=import_id)
        return Response(HistoryImportSerializer(upload, context=self.get_serializer_context()).data)


class RunImportView(LoopxView):
    """The import a run came from: its source system, file name, sha256, events and what was skipped."""

    serializer_class = HistoryImportSerializer
    queryset = HistoryImport.objects.none()

    @extend_schema(operation_id="run_import", responses={200: HistoryImportSerializer, **API_ERRORS})
    def get(self, request: Request, run_id: str) -> Response:
        run = self.get_run(request, run_id)
        row = imported_run_of(run_id=run.run_id)
        if row is None:
            raise NotFound("This run was not imported from another runtime's history.")
        upload = import_queryset().get(pk=row.history_import_id)  # type: ignore[attr-defined]
        return Response(HistoryImportSerializer(upload, context=self.get_serializer_context()).data)


class IntentClassListView(LoopxView):
    """Which map entry decided each imported intent's class (empty for a turn that was not imported)."""

    serializer_class = IntentClassSerializer
    queryset = HistoryImport.objects.none()

    @extend_schema(operation_id="turn_intent_classes", responses={200: IntentClassSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        sources = intent_class_sources(run_id=run_id, turn=turn)
        return Response(IntentClassSerializer(sources, many=True).data)
