"""Journal API: ingest (the receipt layer) and reads (runs, branches, turns with their timeline,
records). Views parse, call a service or selector, and respond."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import CanRunRecovery, runtime_token
from journals.api import ErrorSerializer, LoopxView
from journals.filters import RunFilter, TurnFilter
from journals.models import DECISIONS, TURN_STATUSES, Branch, Intent, JournalRecord, Run, Turn, TurnEffective, TurnState
from journals.renderers import FastJSONRenderer
from journals.selectors import (
    branches_list,
    record_public,
    run_find,
    runs_list,
    turn_detail,
    turn_page_rows,
    turn_records,
    turn_rows,
)
from journals.serializers import (
    BranchSerializer,
    IngestConflictSerializer,
    IngestResultSerializer,
    IntentSerializer,
    RecordSerializer,
    RunDetailSerializer,
    RunSerializer,
    TurnDetailSerializer,
    TurnSerializer,
)
from journals.services import IngestError, fencing_parse, high_water_parse, records_ingest
from journals.store import TurnRows


class _RawBatchParser(BaseParser):
    """Hands the body to the ingest service as bytes, reading at most one byte past the batch limit
    (the service then answers 413) so that an oversized body is never held in memory whole."""

    # request.data is whatever parse returns; the stubs only allow a mapping.
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> bytes:  # type: ignore[override]
        if stream is None:
            return b""
        body: bytes = stream.read(settings.LOOPX_INGEST_MAX_BATCH_BYTES + 1)
        return body


class NdjsonParser(_RawBatchParser):
    media_type = "application/x-ndjson"


class JsonlParser(_RawBatchParser):
    media_type = "application/jsonl"


class PlainTextParser(_RawBatchParser):
    media_type = "text/plain"


class JsonArrayParser(_RawBatchParser):
    media_type = "application/json"


_JSONL_BODY = {"type": "string", "description": "One JSON record per line (JSONL), in file order."}
_ARRAY_BODY = {"type": "array", "items": {"type": "object", "additionalProperties": True}}
API_ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Malformed input; nothing stored."),
    401: OpenApiResponse(ErrorSerializer, description="No or invalid credentials."),
    403: OpenApiResponse(ErrorSerializer, description="Not allowed (role or token run prefix)."),
    404: OpenApiResponse(ErrorSerializer, description="No such run or turn."),
}


_CONDITIONS = [
    OpenApiParameter(
        "LoopX-Fencing",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        required=False,
        description=(
            "`<turn>=<token>[, ...]` (turn ids percent-encoded): the fencing tokens the writer holds from the "
            "gate's claim. A token that is not the turn's current one: 409 `fenced`. A record naming a turn "
            "that has been claimed needs its entry here: else 409 `fencing_required`."
        ),
    ),
    OpenApiParameter(
        "LoopX-Expect",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        required=False,
        description=(
            "`<branch>:<lsn>[, ...]`: the last lsn the writer believes stored on the branch (-1 for none). "
            "When the branch's ack cursor differs: 409 `offset_mismatch`."
        ),
    ),
]


class JournalView(LoopxView):
    """The journal API's views: JSON written by orjson (journals/renderers.py), the browsable API beside it."""

    renderer_classes = [FastJSONRenderer, BrowsableAPIRenderer]

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response):
            response.add_post_render_callback(self._release)
        return response

    def _release(self, response: Response) -> None:
        # DRF's rendering leaves the answer in reference cycles: the response in its own renderer context
        # (``context["response"]``), beside the view, which holds it too (``view.response``) and is held by
        # DRF's request. Nothing reads them once the bytes are rendered; let go, a page's data (50 turns'
        # dicts and lists) is freed as soon as the answer is sent instead of waiting for the cyclic garbage
        # collector, whose passes it would otherwise bring on more often, each one walking the page's data.
        response.renderer_context = {}  # type: ignore[attr-defined]  # set by finalize_response; not in the stubs
        self.response = None  # type: ignore[assignment]  # the stubs declare it always set


def _chunked(request: Request) -> bool:
    meta = request.META
    return "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and not meta.get("CONTENT_LENGTH")


def _chunked_body(request: Request) -> bytes:
    """A body sent chunked (no Content-Length: curl -T -, a streaming writer). Django reads a request without
    Content-Length as empty; the WSGI server (gunicorn, which `make run` serves with too) has already taken
    the chunks apart, so the body is its input read to the end, at most one byte past the batch limit (the
    service then answers 413)."""
    stream = request.META.get("wsgi.input")  # the WSGI environ: Django's own stream reads nothing here
    if stream is None:
        return b""
    data: bytes = stream.read(settings.LOOPX_INGEST_MAX_BATCH_BYTES + 1)
    return data


class LimitsSerializer(serializers.Serializer[Any]):
    max_line_bytes = serializers.IntegerField(help_text="The longest record line ingest takes (413 `line_too_large`).")
    max_batch_bytes = serializers.IntegerField(help_text="The largest batch body (413 `batch_too_large`).")
    max_batch_records = serializers.IntegerField(help_text="The most records in one batch (413 `too_many_records`).")
    claim_lease_seconds = serializers.IntegerField(help_text="The lease a claim grants, in seconds.")


class LimitsView(JournalView):
    """The server's limits, so that a runtime refuses a record it could never ship before it writes it."""

    serializer_class = LimitsSerializer
    pagination_class = None

    @extend_schema(operation_id="limits_retrieve", responses={200: LimitsSerializer, **API_ERRORS})
    def get(self, request: Request) -> Response:
        return Response(
            {
                "max_line_bytes": settings.LOOPX_INGEST_MAX_LINE_BYTES,
                "max_batch_bytes": settings.LOOPX_INGEST_MAX_BATCH_BYTES,
                "max_batch_records": settings.LOOPX_INGEST_MAX_BATCH_RECORDS,
                "claim_lease_seconds": settings.LOOPX_CLAIM_LEASE_SECONDS,
            }
        )


class RecordsView(JournalView):
    """POST: ingest a batch (atomic, idempotent on redelivery). GET: the run's records, redacted."""

    queryset = JournalRecord.objects.none()
    parser_classes = [NdjsonParser, JsonlParser, PlainTextParser, JsonArrayParser]
    permission_classes = [CanRunRecovery]
    serializer_class = RecordSerializer

    @extend_schema(
        operation_id="records_ingest",
        request={
            "application/x-ndjson": _JSONL_BODY,
            "application/jsonl": _JSONL_BODY,
            "text/plain": _JSONL_BODY,
            "application/json": _ARRAY_BODY,
        },
        parameters=_CONDITIONS,
        responses={
            200: IngestResultSerializer,
            409: OpenApiResponse(
                IngestConflictSerializer,
                description="Same (branch, lsn), other bytes; or LoopX-Expect or LoopX-Fencing unmet. Nothing stored.",
            ),
            413: OpenApiResponse(ErrorSerializer, description="A line, the batch or the record count is too large."),
            **API_ERRORS,
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        self.check_run_allowed(request, run_id)
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isdigit() and int(declared) > settings.LOOPX_INGEST_MAX_BATCH_BYTES:
            # Refused before reading a byte of it.
            limit = settings.LOOPX_INGEST_MAX_BATCH_BYTES
            error = IngestError(413, "batch_too_large", f"the batch exceeds {limit} bytes", limit=limit)
            return Response(error.as_dict(), status=413)
        # DRF hands an empty dict (not bytes) when there is no body at all.
        body = request.data if isinstance(request.data, bytes) else b""
        if not body and _chunked(request):
            body = _chunked_body(request)
        result = records_ingest(
            run_id=run_id,
            body=body,
            content_type=request.content_type or "",
            token=runtime_token(request),
            fencing=fencing_parse(request.headers.get("LoopX-Fencing")),
            expect=high_water_parse(request.headers.get("LoopX-Expect")),
        )
        return Response(IngestResultSerializer(result).data)

    @extend_schema(operation_id="records_list", responses={200: RecordSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str) -> Response:
        run = self.get_run(request, run_id)
        page = self.paginate_queryset(run.records.order_by("seq"))
        assert page is not None  # PAGE_SIZE is set: every page of the API is paginated
        return self.get_paginated_response(RecordSerializer([record_public(r) for r in page], many=True).data)


class RunListView(JournalView):
    """Runs, newest change first; filter by ``status``, sort by ``ordering`` (journals/filters.py)."""

    serializer_class = RunSerializer
    filterset_class = RunFilter

    def get_queryset(self) -> QuerySet[Run]:
        return runs_list(scope=self.run_scope())

    @extend_schema(operation_id="runs_list", responses={200: RunSerializer(many=True), **API_ERRORS})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(RunSerializer(page, many=True).data)


class RunDetailView(JournalView):
    serializer_class = RunDetailSerializer
    queryset = Run.objects.none()

    @extend_schema(operation_id="runs_retrieve", responses={200: RunDetailSerializer, **API_ERRORS})
    def get(self, request: Request, run_id: str) -> Response:
        run = self.get_run(request, run_id)
        decisions = {
            row["decision"] or "unassessed": row["n"]
            for row in Turn.objects.filter(run=run).values("decision").annotate(n=Count("id")).order_by()
        }
        states = {
            row["state"]: row["n"]
            for row in TurnEffective.objects.filter(run=run).values("state").annotate(n=Count("turn_id")).order_by()
        }
        unassessed = sum(decisions.values()) - sum(states.values())
        if unassessed > 0:
            states["unassessed"] = unassessed
        context = {"decisions": decisions, "states": states}
        return Response(RunDetailSerializer(run, context=context).data)


class BranchListView(JournalView):
    serializer_class = BranchSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[Branch]:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request, no run
            return Branch.objects.none()
        return branches_list(run=self.get_run(self.request, self.kwargs["run_id"]))

    @extend_schema(operation_id="branches_list", responses={200: BranchSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str) -> Response:
        return Response(BranchSerializer(self.get_queryset(), many=True).data)


class TurnCursorPagination(CursorPagination):
    """Turn lists page by cursor (newest change first): no COUNT over a table of 100,000s of turns and no
    OFFSET scan for deep pages, so every page costs the same (benchmarks/bench_reads.py). The run's page
    (GET /api/v1/runs/{run}) carries the counts per decision."""

    page_size = 50
    ordering = ("-updated_at", "-id")

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            # A position that is no time, or one at an offset PostgreSQL refuses (16 hours or more; ours are
            # always UTC), comes from a cursor not of our making: an invalid cursor, not a 500.
            try:
                moment = Turn._meta.get_field("updated_at").to_python(cursor.position)
            except DjangoValidationError:
                raise NotFound(self.invalid_cursor_message) from None
            offset = moment.utcoffset()
            if offset is not None and abs(offset) >= timedelta(hours=16):
                raise NotFound(self.invalid_cursor_message)
        return cursor


# The filters whose valid values are a fixed set, matched exactly (journals/filters.py).
_CHOICES = {
    "decision": frozenset(DECISIONS),
    "status": frozenset(TURN_STATUSES),
    "state": frozenset(TurnState.values),
}


class TurnListView(JournalView):
    """Turns, newest change first; filters: decision, reason, status, run, time. Fixed query count."""

    serializer_class = TurnSerializer
    filterset_class = TurnFilter
    pagination_class = TurnCursorPagination

    def get_queryset(self) -> QuerySet[Turn, Mapping[str, Any]]:
        return turn_rows(scope=self.run_scope(), run_id=self.kwargs.get("run_id"))

    def exact_filters(self) -> dict[str, str] | None:
        """The filters of a page that needs no filter set, or None. Building and validating the filter set's
        form is a visible share of a page; a page without any filter (a run's first page, a cursor) needs
        none of it (with no value every filter is a no-op), nor does the common filter by one valid decision
        or status (ChoiceFilters: an exact match). Anything else (other filters, a value to refuse with a
        400) goes through the filter set."""
        params = self.request.query_params
        present = [name for name in TurnFilter.base_filters if name in params]
        if all(
            name in _CHOICES and len(params.getlist(name)) == 1 and params[name] in _CHOICES[name] for name in present
        ):
            return {name: params[name] for name in present}
        return None

    def page_rows(self) -> list[Mapping[str, Any]]:
        run_id = self.kwargs.get("run_id")
        if run_id is not None:
            # Joined, not looked up first: one query less per page. An empty page asks whether the run exists.
            self.check_run_allowed(self.request, run_id)
        exact = self.exact_filters()
        rows: TurnRows
        if exact is None:
            rows = self.filter_queryset(self.get_queryset())
        else:
            rows = turn_page_rows(scope=self.run_scope(), run_id=run_id, exact=exact)
        # CursorPagination is typed for a QuerySet but asks only what TurnRows offers (journals/store.py).
        page = self.paginate_queryset(cast("QuerySet[Turn, Mapping[str, Any]]", rows))
        assert page is not None  # PAGE_SIZE is set: every page of the API is paginated
        return page

    @extend_schema(operation_id="turns_list", responses={200: TurnSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str | None = None) -> Response:
        return self.get_paginated_response([TurnSerializer.row(row) for row in self.page_rows()])


class RunTurnListView(TurnListView):
    @extend_schema(operation_id="run_turns_list", responses={200: TurnSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str | None = None) -> Response:
        page = self.page_rows()
        if not page and run_find(run_id=run_id or "") is None:
            raise NotFound("No such run.")
        return self.get_paginated_response([TurnSerializer.row(row) for row in page])


class TurnDetailView(JournalView):
    serializer_class = TurnDetailSerializer
    queryset = Turn.objects.none()

    @extend_schema(operation_id="turns_retrieve", responses={200: TurnDetailSerializer, **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        self.check_run_allowed(request, run_id, missing="No such run or turn.")
        detail = turn_detail(run_id=run_id, turn_id=turn_id)
        if detail is None:
            raise NotFound("No such run or turn.")
        return Response(detail)


class TurnIntentListView(JournalView):
    serializer_class = IntentSerializer
    queryset = Intent.objects.none()  # for the schema: path parameters and model
    pagination_class = None

    @extend_schema(operation_id="turn_intents_list", responses={200: IntentSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        return Response(IntentSerializer(turn.intents.order_by("position"), many=True).data)


class TurnRecordListView(JournalView):
    serializer_class = RecordSerializer
    queryset = JournalRecord.objects.none()

    @extend_schema(operation_id="turn_records_list", responses={200: RecordSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        page = self.paginate_queryset(turn_records(turn=self.get_turn(request, run_id, turn_id)))
        assert page is not None  # PAGE_SIZE is set: every page of the API is paginated
        return self.get_paginated_response(RecordSerializer([record_public(r) for r in page], many=True).data)
