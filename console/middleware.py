"""Show every date in the operator's own time zone.

The zone is a session setting (chosen on the preferences page, pre-filled from the browser's zone), so it
needs no profile table and follows the operator across pages; without one, settings.TIME_ZONE applies.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

SESSION_KEY = "loopx_tz"


def zone_or_none(name: object) -> zoneinfo.ZoneInfo | None:
    """A ZoneInfo for a known IANA name; None for anything else (a stale or forged session value)."""
    if not isinstance(name, str) or not name or len(name) > 64:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


class OperatorTimezoneMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone = zone_or_none(request.session.get(SESSION_KEY)) if hasattr(request, "session") else None
        if zone is not None:
            timezone.activate(zone)
        else:
            timezone.deactivate()
        try:
            return self.get_response(request)
        finally:
            # Threads are reused between requests: never let one operator's zone leak into the next.
            timezone.deactivate()
