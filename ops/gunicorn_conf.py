"""gunicorn settings for production (Procfile: ``gunicorn -c python:ops.gunicorn_conf loopx_site.wsgi``).

Environment: PORT (8000), WEB_CONCURRENCY (workers; 2 x cores + 1), GUNICORN_TIMEOUT (60 s),
FORWARDED_ALLOW_IPS (the proxy's address, so that X-Forwarded-Proto is believed; 127.0.0.1), and
PROMETHEUS_MULTIPROC_DIR (see ops/metrics.py). gunicorn's own log lines go through the same JSON
formatter and secret filter as the application's; its access log is off because the request-id
middleware writes one JSON line per request already.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

from ops.logconfig import json_logging

bind = f"{os.environ.get('BIND_HOST', '0.0.0.0')}:{os.environ.get('PORT', '8000')}"  # noqa: S104  a container's listener; BIND_HOST narrows it
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1))
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so that a slow leak never takes a host down.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "2000"))
max_requests_jitter = 200
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = None
errorlog = "-"
logconfig_dict: dict[str, Any] = json_logging(
    loggers={
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # One line per request comes from the request-id middleware (with the request id): not twice.
        "gunicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
    },
)


def post_worker_init(worker: Any) -> None:
    # Read the migration graph once per worker now, so that the first /readyz is as fast as the others.
    # gunicorn reads this file before Django's app registry is ready.
    from ops.health import expected_migrations

    expected_migrations()


def child_exit(server: Any, worker: Any) -> None:
    # Multi-process metrics: a dead worker's live gauges must stop counting (its counters stay summed).
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
