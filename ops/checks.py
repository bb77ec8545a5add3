"""Deployment checks of `manage.py check --deploy` that Django does not make itself."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register


@register(deploy=True)
def visibility_timeout_check(app_configs: Any = None, **_: Any) -> list[CheckMessage]:
    """Redis hands a message unacknowledged for longer than the visibility timeout to another worker: below
    the longest hard time limit plus the longest countdown, a task still running (or waiting for its retry)
    would run twice."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    timeout = options.get("visibility_timeout")
    longest = int(getattr(settings, "CELERY_LONGEST_UNACKED_SECONDS", 0))
    if timeout is None or int(timeout) >= longest:
        return []
    return [
        Warning(
            f"CELERY_VISIBILITY_TIMEOUT is {int(timeout)} s, shorter than the longest a message may stay "
            f"unacknowledged ({longest} s: the longest task time limit plus the longest webhook retry countdown).",
            hint="Unset CELERY_VISIBILITY_TIMEOUT (its default follows the time limits) or raise it.",
            id="loopx.W001",
        )
    ]
