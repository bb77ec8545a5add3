"""A live LoopX server for the client's tests: `manage.py runserver --noreload` on a free loopback port,
over a SQLite database of its own, migrated, with runtime tokens (recovery/chaos/server.py). Started once
for the session, stopped (our own child, by its handle) at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recovery.chaos.server import LiveServer

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"


@pytest.fixture(scope="session")
def live_server_for_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("client-server")) as server:
        yield server


@pytest.fixture(scope="session")
def limited_token(live_server_for_client: LiveServer) -> str:
    """A runtime token that may only touch runs whose id starts with `only-`."""
    out = live_server_for_client._manage("create_api_token", "limited-runtime", "--run-prefix", "only-")
    return out.strip().splitlines()[-1]
