"""The API's shared base: authentication (runtime tokens, sessions), the per-token throttle, typed
service errors, and run lookups that respect a token's run prefix."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import (
    APIException,
    AuthenticationFailed,
    MethodNotAllowed,
    NotAcceptable,
    NotAuthenticated,
    NotFound,
    ParseError,
    PermissionDenied,
    Throttled,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from journals.access import CanView, RunScope, request_scope
from journals.authentication import ApiTokenAuthentication, ApiTokenRateThrottle
from journals.doors import NO_RUN, run_for_read, run_for_write, run_id_check, turn_for_read, turn_for_write
from journals.models import Run, Turn
from kernel.errors import ServiceError


class ErrorSerializer(serializers.Serializer[Any]):
    """Every refusal of a service: a stable code, one line of words, and the 1-based line when a
    record of a batch was at fault. Some codes add fields (e.g. `lsn_conflict`: branch, lsn, digests)."""

    error = serializers.CharField()
    detail = serializers.CharField()
    line = serializers.IntegerField(allow_null=True)


# The framework's own refusals, in the one error shape with a stable code each (docs/api.md, "Errors").
_FRAMEWORK_CODES: tuple[tuple[type[APIException], str], ...] = (
    (NotAuthenticated, "unauthenticated"),
    (AuthenticationFailed, "token_invalid"),
    (PermissionDenied, "role_required"),
    (NotFound, "not_found"),
    (MethodNotAllowed, "method_not_allowed"),
    (NotAcceptable, "not_acceptable"),
    (UnsupportedMediaType, "unsupported_media_type"),
    (Throttled, "throttled"),
    (ParseError, "parse_error"),
)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every refusal of the API in one shape, ``{error, detail, line}`` (settings: REST_FRAMEWORK's
    EXCEPTION_HANDLER): a service's typed error as it is, the framework's own (authentication, permission,
    routing, media type, throttling) with a code after its kind, so that a runtime reads one field whatever
    refused it. Anything else is not a refusal: None, and Django answers it."""
    if isinstance(exc, ServiceError):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, Http404):
        exc = NotFound(str(exc) or None)  # a door's "no such ...": the framework's own 404, with its words
    if isinstance(exc, ValidationError):
        # Same shape as every other refusal, with the per-field messages beside it.
        body = {"error": "invalid_request", "detail": "the request body is invalid", "line": None}
        return Response({**body, "fields": exc.detail}, status=400)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((code for kind, code in _FRAMEWORK_CODES if isinstance(exc, kind)), None)
    if code is None:
        code = str(getattr(exc, "default_code", "error"))
    data = response.data
    detail = data.get("detail") if isinstance(data, dict) else None
    response.data = {"error": code, "detail": str(detail) if detail is not None else code, "line": None}
    return response


class LoopxView(GenericAPIView[Any]):
    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    throttle_classes = [ApiTokenRateThrottle]
    permission_classes = [CanView]

    def check_run_allowed(self, request: Request, run_id: str, missing: str = NO_RUN) -> None:
        """A runtime token outside its prefix is refused (403: it knows its own prefix). A person outside
        their teams' runs is told the run does not exist (404, the very answer of a missing run), so that
        the answer never confirms that another team's run exists (journals.doors)."""
        run_id_check(actor=request.user, run_id=run_id, missing=missing)

    def get_run(self, request: Request, run_id: str) -> Run:
        """The run through its door (journals.doors): the write door for a request that changes something."""
        door = run_for_read if request.method in SAFE_METHODS else run_for_write
        return door(actor=request.user, run_id=run_id)

    def get_turn(self, request: Request, run_id: str, turn_id: str, *, timeline: bool = False) -> Turn:
        """The turn through its door (journals.doors): the write door for a request that changes something."""
        door = turn_for_read if request.method in SAFE_METHODS else turn_for_write
        return door(actor=request.user, run_id=run_id, turn_id=turn_id, timeline=timeline)

    def run_scope(self) -> RunScope:
        """The runs this request may see and act on (journals.access.run_scope)."""
        return request_scope(self.request)

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "view": self}
