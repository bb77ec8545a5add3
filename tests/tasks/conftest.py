"""Fixtures of the background-work tests: ingest through the store's service, a recorder standing in
for the broker when a test runs the task bodies in-process, and real worker processes on a private Redis
(``stack``) for the tests that need them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ops.demo import batches
from tests.tasks.procs import RedisServer, Stack, publishing_to


def ingest(run_id: str, lines: list[bytes], *, batch_size: int | None = None) -> Any:
    """Ingest ``lines`` through journals.services.records_ingest, in batches; returns the Run."""
    from journals.services import records_ingest

    result = None
    for body in batches(lines, batch_size or max(1, len(lines))):
        result = records_ingest(run_id=run_id, body=body, content_type="application/x-ndjson", token=None)
    assert result is not None
    return result.run


@dataclass
class Published:
    """Messages the code under test handed to the broker (assess_run only), in order."""

    run_ids: list[str] = field(default_factory=list)
    fail: bool = False


@pytest.fixture
def published(monkeypatch) -> Published:
    """Replace assess_run's publish with a recorder (``fail=True``: the broker is down)."""
    from recovery.tasks import assess_run

    record = Published()

    def apply_async(args: Any = None, kwargs: Any = None, **options: Any) -> None:
        if record.fail:
            raise ConnectionError("broker unreachable")
        record.run_ids.append(args[0])

    monkeypatch.setattr(assess_run, "apply_async", apply_async)
    return record


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.kill()


@pytest.fixture
def stack(redis_server, transactional_db, tmp_path):
    """Celery workers (and beat) as subprocesses on a private Redis and the test database; this process
    publishes to that Redis while the test runs."""
    redis_server.flush()
    stack = Stack(redis_server, tmp_path)
    with publishing_to(redis_server.url):
        yield stack
        stack.stop()  # before the database is flushed: no worker may still hold a connection
