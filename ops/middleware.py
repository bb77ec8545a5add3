"""Request-id middleware: every request gets an id, logs carry it, the response returns it, and the
Celery tasks the request enqueues inherit it (ops.celery_signals)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from kernel import context

logger = logging.getLogger("loopx.request")

HEADER = "X-Request-ID"


class RequestIdMiddleware:
    """Accepts a well-formed incoming ``X-Request-ID`` (a proxy's or a runtime's), else makes one.

    Put it first in MIDDLEWARE so that every later middleware's log lines carry the id.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = context.clean_request_id(request.headers.get(HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        token = context.request_id_var.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response[HEADER] = request_id
            # One access line per request: method, path (never the query string: it may carry a token)
            # and status. Health checks and scrapes are too frequent to be worth a line each.
            if not request.path.startswith(("/healthz", "/readyz", "/metrics", "/static/")):
                logger.info(
                    "%s %s %s",
                    request.method,
                    request.path,
                    response.status_code,
                    extra={
                        "event": "http.request",
                        "method": request.method,
                        "path": request.path,
                        "status": response.status_code,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                    },
                )
            return response
        finally:
            context.request_id_var.reset(token)


class ContentSecurityPolicyMiddleware:
    """Pages load nothing from another host: scripts, styles, images and forms come from this one
    (``LOOPX_CSP``, docs/deployment.md). The console's templates hold no inline script, style or event
    handler, so the policy needs no 'unsafe-inline'. A response that set its own policy keeps it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = str(getattr(settings, "LOOPX_CSP", "") or "")
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
