"""/healthz and /readyz: fast answers, and a JSON body naming what failed."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import OperationalError, connections
from django.utils import timezone

from audits.models import Heartbeat
from ops import health


@pytest.fixture(autouse=True)
def _warm_migration_graph() -> None:
    # Read once per process (gunicorn_conf.post_worker_init does it at worker start in production).
    health.expected_migrations()


def _beat(age_seconds: float = 0) -> None:
    Heartbeat.objects.update_or_create(
        name="beat@test",
        defaults={
            "role": "beat", "hostname": "test", "pid": 1, "last_seen": timezone.now() - timedelta(seconds=age_seconds)
        },
    )


@pytest.fixture(autouse=True)
def _probe_timeout(settings):
    # The probes' own budget (0.5 s by default) is what production uses; a loaded CI machine can take longer
    # to answer a healthy broker, so the tests give it more room. What they check is that a probe is bounded
    # (a dead peer never hangs /readyz for a connect timeout) and that failures are named, not raw speed,
    # which benchmarks measure.
    settings.LOOPX_READYZ_TIMEOUT = 2.0


def _ready(client):
    started = time.monotonic()
    response = client.get("/readyz")
    elapsed = time.monotonic() - started
    assert elapsed < 6.0, f"/readyz took {elapsed:.2f}s: a probe is not bounded"
    return response.status_code, response.json()


def test_healthz_answers_without_the_database(client):
    # No django_db mark: pytest-django refuses any database access, as an unreachable database would.
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded" and body["down"] == ["database"]
    assert response["X-Request-ID"]


@pytest.mark.django_db(transaction=True)
def test_ready_when_everything_answers(client):
    _beat()
    status, body = _ready(client)
    assert status == 200, body
    assert body["status"] == "ready" and body["failed"] == []
    passed = {name for name, check in body["checks"].items() if check["ok"]}
    assert passed == {"database", "migrations", "broker", "beat"}


@pytest.mark.django_db(transaction=True)
def test_stale_or_missing_beat_heartbeat_is_not_ready(client, settings):
    status, body = _ready(client)
    assert (status, body["failed"]) == (503, ["beat"])
    assert body["checks"]["beat"]["error"] == "no beat heartbeat recorded"
    _beat(age_seconds=3600)
    status, body = _ready(client)
    assert (status, body["failed"]) == (503, ["beat"])
    assert "old" in body["checks"]["beat"]["error"]
    settings.LOOPX_READYZ_REQUIRE_BEAT = False
    status, body = _ready(client)
    assert status == 200 and "beat" not in body["checks"]


@pytest.mark.django_db(transaction=True)
def test_unapplied_migration_is_not_ready(client, monkeypatch):
    _beat()
    expected = health.expected_migrations() | {("journals", "9999_not_applied_yet")}
    monkeypatch.setattr(health, "expected_migrations", lambda: expected)
    status, body = _ready(client)
    assert (status, body["failed"]) == (503, ["migrations"])
    assert body["checks"]["migrations"]["unapplied"] == ["journals.9999_not_applied_yet"]


@pytest.mark.django_db(transaction=True)
def test_unreachable_database_is_not_ready(client, monkeypatch):
    _beat()
    connection = connections["default"]
    if connection.vendor == "postgresql":
        # A real refusal: reconnect to a port nobody listens on.
        from tests.ops.conftest import free_port

        saved = connection.settings_dict["PORT"]
        connection.close()
        connection.settings_dict["PORT"] = str(free_port())
        try:
            status, body = _ready(client)
        finally:
            connection.close()
            connection.settings_dict["PORT"] = saved
    else:
        # SQLite's test database lives in memory and cannot be "down": refuse the connection instead.
        def refuse() -> None:
            raise OperationalError("unable to open database file")

        monkeypatch.setattr(connection, "ensure_connection", refuse)
        status, body = _ready(client)
        monkeypatch.undo()
    assert status == 503
    assert body["failed"] == ["database", "beat", "migrations"]
    assert body["checks"]["database"]["error"] == "database unreachable: OperationalError"


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_broker_down_is_not_ready_and_named(client, settings, own_redis):
    _beat()
    settings.CELERY_BROKER_URL = own_redis.url
    status, body = _ready(client)
    assert status == 200, body
    assert body["checks"]["broker"]["transport"] == "redis"
    own_redis.stop()
    status, body = _ready(client)
    assert status == 503
    assert body["failed"] == ["broker"]
    assert body["checks"]["broker"]["error"].startswith("redis broker unreachable")
    assert own_redis.url not in str(body)
