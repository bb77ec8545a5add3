"""Shared fixtures: personas, service gates and helpers.

Tests that need PostgreSQL or Redis run whenever DATABASE_URL / REDIS_URL point at them and say so
plainly when skipped. With LOOPX_REQUIRE_SERVICES=1 (set by .ci/run) a skip becomes a failure, so CI
skips nothing.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.personas import *  # noqa: F403 - the named personas (operator, viewer, outsider, admin, runtime)

REQUIRE_SERVICES = os.environ.get("LOOPX_REQUIRE_SERVICES") == "1"


def _gate(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"LOOPX_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres"):
        url = os.environ.get("DATABASE_URL", "")
        if not url.startswith(("postgres://", "postgresql://")):
            _gate("needs PostgreSQL: set DATABASE_URL=postgres://... to run it")
    if item.get_closest_marker("redis") and not os.environ.get("REDIS_URL"):
        _gate("needs Redis: set REDIS_URL=redis://... to run it")


@pytest.fixture
def eager_tasks():  # type: ignore[no-untyped-def]
    """Run published tasks inline, as a worker would (the settings are read once by the Celery app, so its
    configuration is switched, not Django's setting). Used by the package tests of the API and console."""
    from loopx_site.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record validate_package publishes (the upload's id) instead of sending them anywhere."""
    from recovery.tasks import validate_package

    published: list[str] = []
    monkeypatch.setattr(validate_package, "apply_async", lambda args=None, **_: published.append(args[0]))
    return published


# Names the tests' webhook resolver knows; any other name resolves to nothing. No test resolves a name
# through the network, and none sends a packet outside 127.0.0.0/8.
TEST_NAMES = {"localhost": ["127.0.0.1"]}


@pytest.fixture(autouse=True)
def webhook_destinations(monkeypatch: pytest.MonkeyPatch, settings: Any) -> dict[str, list[str]]:
    """Webhooks in tests: the resolver is a table (``TEST_NAMES``, extended by a test through the returned
    dict), and loopback is on the allow-list so that the loopback receivers of the webhook tests are
    reached; a test of the refusals empties ``settings.LOOPX_WEBHOOK_ALLOW_NETS``."""
    from notifications import destinations

    names = {k: list(v) for k, v in TEST_NAMES.items()}

    def resolve(host: str, port: int) -> list[str]:
        if host not in names:
            raise OSError(f"{host} is not in the tests' resolver table")
        return list(names[host])

    monkeypatch.setattr(destinations, "resolve_host", resolve)
    settings.LOOPX_WEBHOOK_ALLOW_NETS = ["127.0.0.0/8"]
    return names


@pytest.fixture
def eager_celery():
    """Run tasks inline (retries included), as a worker would, without a broker."""
    from loopx_site.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved
