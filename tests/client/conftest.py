"""A live LoopX server for the client's tests: `manage.py runserver --noreload` on a free loopback port,
over a SQLite database of its own, migrated, with runtime tokens (certification/server.py). Started once
for the session, stopped (our own child, by its handle) at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from certification.server import LiveServer

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


def operator_approves(
    server: LiveServer, run: str, turn: str, evidence: dict[str, str], *, actor: str, reason: str
) -> None:
    """An operator's approval with evidence, through the console's service (turn_approve), in a Django
    process against the server's database: a runtime token may never approve."""
    server._manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import Group, User\n"
        "from journals.models import Turn\n"
        "from recovery.services import turn_approve\n"
        f"user, made = User.objects.get_or_create(username={actor!r})\n"
        "if made: user.groups.add(Group.objects.get(name='operator'))\n"
        f"turn = Turn.objects.select_related('run').get(run__run_id={run!r}, turn_id={turn!r})\n"
        f"turn_approve(turn=turn, actor=user, reason={reason!r}, evidence={evidence!r})\n",
    )


# The claim lease of the short-lease server: a stalled worker's lease runs out within the test.
SHORT_LEASE_SECONDS = 3


@pytest.fixture(scope="session")
def short_lease_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A second live server whose claim lease is a few seconds (LOOPX_CLAIM_LEASE_SECONDS)."""
    server = LiveServer(tmp_path_factory.mktemp("client-short-lease"))
    server.env["LOOPX_CLAIM_LEASE_SECONDS"] = str(SHORT_LEASE_SECONDS)
    with server:
        yield server
