"""Where an act came from, for its trail row (trail/chain.py): the request's path (api, admin or console),
a command line (``with via("cli")``), or the system. A kernel bit, so that every layer's commands can say so.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

VIA = ("console", "api", "admin", "cli", "system")

_via: contextvars.ContextVar[str] = contextvars.ContextVar("loopx_trail_via", default="system")


def current_via() -> str:
    return _via.get()


class via:
    """``with via("cli"): ...``: acts inside are recorded as coming from there."""

    def __init__(self, name: str) -> None:
        if name not in VIA:
            raise ValueError(f"via must be one of {', '.join(VIA)}")
        self.name = name
        self._token: contextvars.Token[str] | None = None

    def __enter__(self) -> via:
        self._token = _via.set(self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _via.reset(self._token)


def via_of_path(path: str) -> str:
    if path.startswith("/api/"):
        return "api"
    if path.startswith("/admin/"):
        return "admin"
    return "console"


class TrailViaMiddleware:
    """Names the path an act of this request took (api, admin or console) for its trail row."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with via(via_of_path(request.path)):
            return self.get_response(request)


