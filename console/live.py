"""Live refresh: a list's results, a turn's state card, a run's page or the overview's figures, re-read
every few seconds by htmx.

The page polls its own address (filters and page kept) with htmx's headers, and its view answers with the
polled part only: the same view, selector and scope as the full page, so a viewer's rights and a team's
runs are exactly the page's. ``Vary`` keeps a browser from showing the part where it had the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

POLL_SECONDS = 10


def live_part(request: HttpRequest, region: str) -> bool:
    """Whether htmx asks for the part of this page that fills ``region`` (the id of the polled element)."""
    return request.headers.get("HX-Request") == "true" and request.headers.get("HX-Target") == region


def render_live(
    request: HttpRequest, template: str, part: str, region: str, context: Mapping[str, Any]
) -> HttpResponse:
    """The page, or only its polled part when htmx asks for it."""
    chosen = part if live_part(request, region) else template
    response = render(request, chosen, {**context, "live_region": region, "poll_seconds": POLL_SECONDS})
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response
