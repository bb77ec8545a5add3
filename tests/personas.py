"""Named personas for API and page tests: an operator, a viewer, an outsider without a role, an admin,
and a runtime (API token). Each comes with a ready client.

The operator and the viewer are members of the team of every run (prefix ""); the two teams' personas
(``blue_operator``, ``red_operator``, ``red_viewer``) see only their own team's runs (``blue-``, ``red-``),
and ``teamless_operator`` holds the operator role in no team, so sees no run at all (docs/access.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # models load only once Django is set up (this module is imported by conftest)
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from journals.models import ApiToken


ALL_RUNS = ("all-runs", "")  # (team, its one prefix)
BLUE = ("blue", "blue-")
RED = ("red", "red-")


def _user(username: str, group: str | None, team: tuple[str, str] | None = ALL_RUNS, **extra: Any) -> User:
    from django.contrib.auth.models import Group, User

    from teams.services import team_ensure, team_members_add

    user = User.objects.create_user(username=username, password="correct-horse-battery", **extra)
    if group:
        user.groups.add(Group.objects.get(name=group))
    if team is not None:
        name, prefix = team
        team_members_add(team=team_ensure(name=name, prefixes=[prefix]), users=[user])
    return user


def _client(user: User) -> APIClient:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def operator(db) -> User:
    return _user("olivia-operator", "operator")


@pytest.fixture
def viewer(db) -> User:
    return _user("victor-viewer", "viewer")


@pytest.fixture
def outsider(db) -> User:
    return _user("oscar-outsider", None, team=None)


@pytest.fixture
def blue_operator(db) -> User:
    """An operator of the blue team: sees and acts on runs whose id starts with ``blue-`` only."""
    return _user("bea-blue", "operator", team=BLUE)


@pytest.fixture
def red_operator(db) -> User:
    """An operator of the red team (runs ``red-...``): the outsider to the blue team's runs."""
    return _user("rex-red", "operator", team=RED)


@pytest.fixture
def red_viewer(db) -> User:
    return _user("rita-red", "viewer", team=RED)


@pytest.fixture
def teamless_operator(db) -> User:
    """The operator role in no team: fail closed, no run at all."""
    return _user("nemo-noteam", "operator", team=None)


@pytest.fixture
def admin_user(db) -> User:
    # The admin role sees every run, in no team; administrators also use the Django admin.
    return _user("ada-admin", "admin", team=None, is_staff=True)


@pytest.fixture
def operator_client(operator) -> APIClient:
    return _client(operator)


@pytest.fixture
def viewer_client(viewer) -> APIClient:
    return _client(viewer)


@pytest.fixture
def outsider_client(outsider) -> APIClient:
    return _client(outsider)


@pytest.fixture
def admin_client_api(admin_user) -> APIClient:
    return _client(admin_user)


@pytest.fixture
def blue_client(blue_operator) -> APIClient:
    return _client(blue_operator)


@pytest.fixture
def red_client(red_operator) -> APIClient:
    return _client(red_operator)


@pytest.fixture
def red_viewer_client(red_viewer) -> APIClient:
    return _client(red_viewer)


@pytest.fixture
def teamless_client(teamless_operator) -> APIClient:
    return _client(teamless_operator)


@dataclass
class Runtime:
    token: ApiToken
    raw: str
    client: APIClient


def make_runtime(name: str = "runtime-a", run_prefix: str = "") -> Runtime:
    from rest_framework.test import APIClient

    from trail.tokens import api_token_create

    token, raw = api_token_create(name=name, run_prefix=run_prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Runtime(token=token, raw=raw, client=client)


@pytest.fixture
def runtime(db) -> Runtime:
    """A runtime's API token without a run prefix, and a client that sends it."""
    return make_runtime()
