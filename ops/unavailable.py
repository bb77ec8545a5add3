"""A request that needs a dependency which is down answers 503 with ``Retry-After``, not 500.

While the database is unreachable (refused, restarting, the connection cut under a request) every
request fails the same way and none of it is a bug: a runtime's client retries a 503 after
``Retry-After`` seconds, a person sees a page that says what is down. The API answers the one error
shape ``{"error": "unavailable", "detail": ..., "line": null}``; the console a plain page (no template
that needs the database). The same holds for the message broker where a request cannot do without it
(today every publish from a request gives up quietly and the sweeps publish later, so this is the
backstop).

Two ways in, one answer: ``process_exception`` for an error raised by a view (DRF re-raises what it does
not know), and, for one raised by another middleware (the session read by the console's timezone
middleware, the session saved on the way out), a ``got_request_exception`` receiver that marks the
request so that this middleware, outermost but for the request id, turns Django's 500 into the 503 (or
catches the error itself when the 500 handler needed the database too).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
_MARK = "_loopx_dependency_down"
# SQLSTATEs of a server that is going away or not taking connections (PostgreSQL's class 08 is the
# connection exceptions): admin or crash shutdown, starting up or in recovery, too many connections.
_PG_DOWN = ("57P01", "57P02", "57P03", "53300")
_SQLITE_DOWN = ("SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_BUSY", "SQLITE_LOCKED")


def dependency_down(exc: BaseException | None) -> str | None:
    """``"database"`` or ``"broker"`` when ``exc`` says that dependency cannot be reached; None for any other
    error (a bug, a bad statement, a deadlock), which stays a 500."""
    if isinstance(exc, InterfaceError):
        return "database"  # the connection is unusable (closed under us)
    if isinstance(exc, OperationalError):
        return "database" if _connection_failure(exc) else None
    return "broker" if _broker_failure(exc) else None


def _connection_failure(exc: OperationalError) -> bool:
    cause = exc.__cause__
    if cause is None:
        return True
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate:
        return str(sqlstate).startswith("08") or sqlstate in _PG_DOWN
    errorname = getattr(cause, "sqlite_errorname", None)
    if errorname is not None:
        return str(errorname) in _SQLITE_DOWN
    # psycopg names no SQLSTATE when there is no server to answer: refused, reset, closed unexpectedly.
    return True


def _broker_failure(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    from kombu.exceptions import OperationalError as BrokerError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return isinstance(exc, BrokerError | RedisConnectionError | RedisTimeoutError)


def retry_after() -> int:
    return int(getattr(settings, "LOOPX_UNAVAILABLE_RETRY_AFTER", 5))


_WHAT = {"database": "the database", "broker": "the message broker"}


def unavailable_response(request: HttpRequest, dependency: str) -> HttpResponse:
    """503 with ``Retry-After``: JSON under /api/, a plain page elsewhere."""
    seconds = retry_after()
    what = _WHAT.get(dependency, dependency)
    response: HttpResponse
    if request.path.startswith(API_PREFIX):
        detail = f"{what} is unreachable; nothing was changed by this request, try again in {seconds} s"
        response = JsonResponse({"error": "unavailable", "detail": detail, "line": None}, status=503)
    else:
        context = {
            "status": 503,
            "title": f"{what.capitalize()} is unreachable",
            "words": f"LoopX cannot reach {what} right now, so this page cannot be shown. Nothing you did "
            f"was lost; try again in a few seconds. Whoever runs this site can see what is down at /healthz.",
            "request_id": getattr(request, "request_id", ""),
            "signed_in": False,  # asking would need the session, which is in the database
        }
        # error.html extends nothing that needs the database or a context processor.
        response = HttpResponse(loader.get_template("error.html").render(context), status=503)
    response["Retry-After"] = str(seconds)
    response["Cache-Control"] = "no-store"
    return response


def remember_dependency_down(sender: Any = None, request: HttpRequest | None = None, **_: Any) -> None:
    """``got_request_exception`` receiver: mark the request when the uncaught error says a dependency is down
    (the error raised by a middleware never reaches ``process_exception``)."""
    down = dependency_down(sys.exc_info()[1])
    if down is not None and request is not None:
        setattr(request, _MARK, down)


class DependencyUnavailableMiddleware:
    """Put it right after the request id middleware: it must wrap every middleware that reads the database."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            response = self.get_response(request)
        except Exception as exc:
            # The 500 handler itself needed the database (a page that asks who is signed in reads the
            # session): the error comes out of the handler.
            down = dependency_down(exc)
            if down is None:
                raise
            return unavailable_response(request, down)
        down = getattr(request, _MARK, None)
        if down is not None and response.status_code == 500:
            return unavailable_response(request, down)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        down = dependency_down(exception)
        if down is None:
            return None
        logger.warning(
            "%s unreachable: %s answered 503",
            down,
            request.path,
            extra={"event": "dependency.unavailable", "dependency": down, "error": type(exception).__name__},
        )
        return unavailable_response(request, down)
