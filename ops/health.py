"""``/healthz`` (the process answers, and which dependency is down) and ``/readyz`` (it can do its work).

/healthz is 200 whenever the process answers; its body says ``"status": "ok"`` or ``"degraded"`` with
``"down"``, the dependencies it cannot reach (``database``, ``broker``), probed as /readyz probes them.

/readyz checks, each under a short deadline so the answer comes well under a second (the broker on a
pool thread, concurrently with the database checks on the request's own connection):

- ``database``: a connection and ``SELECT 1``;
- ``migrations``: every migration on disk is recorded as applied (the leaf nodes, computed once per
  process: the files do not change under a running process);
- ``broker``: a PING to Redis (or the filesystem transport's folder exists);
- ``beat``: the scheduler's heartbeat is younger than ``LOOPX_READYZ_BEAT_MAX_AGE`` seconds (skipped with
  ``LOOPX_READYZ_REQUIRE_BEAT=0``, see docs/deployment.md for why a web host may want that).

200 ``{"status": "ready", ...}`` or 503 ``{"status": "not_ready", "failed": [...], ...}``; every check
names its own error (an exception type or a count, never a URL or a password).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from kernel.dialect import set_local

from . import broker, integrations

# A small fixed pool for the broker probe: one stuck on a black-holed host keeps a thread busy until its
# socket timeout, and later probes then time out quickly instead of piling up threads.
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="loopx-readyz")


class CheckFailed(Exception):
    pass


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


@lru_cache(maxsize=4)
def expected_migrations() -> frozenset[tuple[str, str]]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return frozenset(loader.graph.leaf_nodes())


def check_database(*, migrations: bool = True) -> dict[str, Any]:
    """SELECT 1 and the applied migrations, on the request's own connection under a statement timeout."""
    connection = connections["default"]
    timeout_ms = int(float(_setting("LOOPX_READYZ_TIMEOUT", 0.5)) * 1000)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # Transaction-local: a database that accepts the connection but hangs cannot hold us.
            set_local("statement_timeout", f"{timeout_ms}ms")
            cursor.execute("SELECT 1")
            cursor.fetchone()
            applied = set(MigrationRecorder(connection).applied_migrations()) if migrations else set()
    except Exception as exc:
        raise CheckFailed(f"database unreachable: {type(exc).__name__}") from None
    if not migrations:
        return {}
    missing = sorted(f"{app}.{name}" for app, name in expected_migrations() - applied)
    return {"unapplied": missing}


def check_broker() -> dict[str, Any]:
    try:
        transport = broker.ping(timeout=float(_setting("LOOPX_READYZ_TIMEOUT", 0.5)))
    except broker.BrokerUnavailable as exc:
        raise CheckFailed(str(exc)) from None
    return {"transport": transport}


def check_beat() -> dict[str, Any]:
    age = integrations.beat_heartbeat_age()
    max_age = float(_setting("LOOPX_READYZ_BEAT_MAX_AGE", 300))
    if age is None:
        raise CheckFailed("no beat heartbeat recorded")
    if age > max_age:
        raise CheckFailed(f"beat heartbeat is {int(age)}s old (limit {int(max_age)}s)")
    return {"age_seconds": round(age, 1)}


def run_checks() -> tuple[bool, dict[str, Any]]:
    timeout = float(_setting("LOOPX_READYZ_TIMEOUT", 0.5))
    started = time.perf_counter()
    # The broker is probed on a pool thread while the database checks run here, on the request's own
    # connection (no extra connection per probe; a statement timeout bounds it).
    broker_future = _POOL.submit(_timed, check_broker)
    results: dict[str, Any] = {"database": _timed(check_database)}
    if _setting("LOOPX_READYZ_REQUIRE_BEAT", True):
        down = {"ok": False, "error": "database unreachable"}
        results["beat"] = _timed(check_beat) if results["database"]["ok"] else down
    remaining = max(0.0, timeout - (time.perf_counter() - started))
    try:
        results["broker"] = broker_future.result(timeout=remaining + 0.05)
    except FutureTimeout:
        results["broker"] = {"ok": False, "error": f"no answer within {timeout}s"}
    failed = [name for name, result in results.items() if not result["ok"]]
    # Migrations are read by the database check (same connection); report them as their own check.
    database = results["database"]
    if database["ok"]:
        unapplied = database.pop("unapplied")
        results["migrations"] = {"ok": True}
        if unapplied:
            results["migrations"] = {"ok": False, "error": f"{len(unapplied)} unapplied", "unapplied": unapplied}
    else:
        results["migrations"] = {"ok": False, "error": "database unreachable"}
    if not results["migrations"]["ok"]:
        failed.append("migrations")
    return not failed, {"checks": results, "failed": failed}


def _timed(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        detail = fn()
        result = {"ok": True, **detail}
    except CheckFailed as exc:
        result = {"ok": False, "error": str(exc)}
    except Exception as exc:  # a check's own bug is a failed check, not a 500
        result = {"ok": False, "error": f"check crashed: {type(exc).__name__}"}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def dependency_checks() -> dict[str, dict[str, Any]]:
    """The database (SELECT 1) and the broker (PING), concurrently, each bounded by LOOPX_READYZ_TIMEOUT."""
    timeout = float(_setting("LOOPX_READYZ_TIMEOUT", 0.5))
    started = time.perf_counter()
    broker_future = _POOL.submit(_timed, check_broker)
    results = {"database": _timed(lambda: check_database(migrations=False))}
    remaining = max(0.0, timeout - (time.perf_counter() - started))
    try:
        results["broker"] = broker_future.result(timeout=remaining + 0.05)
    except FutureTimeout:
        results["broker"] = {"ok": False, "error": f"no answer within {timeout}s"}
    return results


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 whenever the process answers, because restarting it would bring no dependency back;
    the body names each dependency that is down (``"down": ["database"]``) and why."""
    checks = dependency_checks()
    down = [name for name, result in checks.items() if not result["ok"]]
    return JsonResponse({"status": "degraded" if down else "ok", "down": down, "checks": checks})


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    ready, body = run_checks()
    return JsonResponse({"status": "ready" if ready else "not_ready", **body}, status=200 if ready else 503)
