"""The one JSON logging configuration, shared by the settings (web, worker, beat) and gunicorn's config.

Imports nothing but the standard library: gunicorn reads its config before Django is set up, and the
settings module must not import application code. Formatter and filter are named by dotted path
(kernel/logging.py) so dictConfig loads them only when logging starts.
"""

from __future__ import annotations

from typing import Any


def json_logging(*, loggers: dict[str, dict[str, Any]], root_level: str | None = None) -> dict[str, Any]:
    """JSON lines on stderr, secrets scrubbed, plus the caller's ``loggers``; ``root_level`` also routes
    the root logger to the same handler."""
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": "kernel.logging.RedactingFilter"}},
        "formatters": {"json": {"()": "kernel.logging.JsonFormatter"}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "json",
                "filters": ["redact"],
            }
        },
        "loggers": loggers,
    }
    if root_level is not None:
        config["root"] = {"handlers": ["console"], "level": root_level}
    return config
