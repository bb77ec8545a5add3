"""Rooms of their own for the suite's parallel workers (pytest-xdist: `make test` runs one per core).

Two workers must not share what a test fills and then reads back whole: the filesystem broker's folders
and the other files under LOOPX_VAR_DIR, and the Redis database the broker's queues live in.
Each worker gets its own: LOOPX_VAR_DIR/<worker>, and the Redis database REDIS_URL names, less the
worker's number (gw0 keeps it, gw1 takes the one below it, and so on). The databases themselves are
already apart: pytest-django gives each worker a test database of its own.

Settings read these variables once, when pytest-django loads them before any conftest is imported, so
this module is a plugin loaded by name (`-p tests.worker_rooms` in pyproject's addopts) and does its work
when it is imported. Run alone (no xdist worker), it changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def _redis_for(url: str, index: int) -> str:
    """The same Redis, database number less ``index``; a worker with no database left is refused."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    number = base - index
    if number < 0:
        raise RuntimeError(
            f"test worker {index} would take Redis database {number}: name a higher database in REDIS_URL "
            "(for example /15) or run fewer workers (PYTEST_ARGS=-n2)"
        )
    return urlunsplit(parts._replace(path=f"/{number}"))


def _rooms(worker: str) -> None:
    index = int(worker.removeprefix("gw"))
    # Unset, var/ is the settings' default (BASE_DIR / "var"): the settings cannot be read here, they are
    # what this sets up, so the checkout's var/ is named again.
    var = os.environ.get("LOOPX_VAR_DIR") or str(Path(__file__).resolve().parent.parent / "var")
    os.environ["LOOPX_VAR_DIR"] = str(Path(var) / worker)
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        url = os.environ.get(name, "")
        if url.startswith(("redis://", "rediss://")):
            os.environ[name] = _redis_for(url, index)


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    _rooms(_worker)
