"""The site's error pages in the console's look: what went wrong, in words, and where to go next.

They never list the site's URL patterns: Django's technical 404 page (shown when DEBUG is on, as in local
development) is replaced by the same friendly page (FriendlyErrorsMiddleware), and under /api/ a missing
path answers in JSON like the rest of the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

API_PREFIX = "/api/"

_WORDS = {
    403: ("You do not have access to this page", "Your role does not allow this. Ask an administrator for the "
          "viewer role to read the console, or the operator role to decide on turns."),
    404: ("Nothing here", "There is no page at this address: the run, turn or record may not exist (any more), "
          "or the link is mistyped."),
    500: ("Something went wrong on our side", "The error was logged with this request's id. Try again in a "
          "moment; if it keeps happening, give the request id to whoever runs this site."),
}
_CODES = {403: "forbidden", 404: "not_found", 500: "server_error"}


def _page(request: HttpRequest, status: int) -> HttpResponse:
    title, words = _WORDS[status]
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"error": _CODES[status], "detail": words}, status=status)
    context = {
        "status": status,
        "title": title,
        "words": words,
        "request_id": getattr(request, "request_id", "") or request.META.get("HTTP_X_REQUEST_ID", ""),
        "signed_in": bool(getattr(getattr(request, "user", None), "is_authenticated", False)),
    }
    # error.html extends nothing that needs the database or a context processor: a 500 must still render.
    html = loader.get_template("error.html").render(context)
    response = HttpResponse(html, status=status)
    response.friendly_error = True  # type: ignore[attr-defined]
    return response


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, 404)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, 403)


def server_error(request: HttpRequest) -> HttpResponse:
    return _page(request, 500)


class FriendlyErrorsMiddleware:
    """Under DEBUG, Django answers a missing page with its technical 404 (which lists every URL pattern):
    answer with the friendly page instead. Responses a view built itself (the API's JSON 404s) are kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            settings.DEBUG
            and response.status_code == 404
            and not getattr(response, "friendly_error", False)
            and _is_technical(response)
        ):
            return _page(request, 404)
        return response


def _is_technical(response: Any) -> bool:
    if not response.get("Content-Type", "").startswith("text/html"):
        return False
    body = getattr(response, "content", b"")
    return b"technical_404" in body or b"Using the URLconf defined in" in body or b"Page not found at" in body
