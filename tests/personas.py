"""Named personas for API and page tests: an operator, a viewer, an outsider without a role, an admin,
and a runtime (API token). Each comes with a ready client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # models load only once Django is set up (this module is imported by conftest)
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from journals.models import ApiToken


def _user(username: str, group: str | None, **extra: Any) -> User:
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username=username, password="correct-horse-battery", **extra)
    if group:
        user.groups.add(Group.objects.get(name=group))
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
    return _user("oscar-outsider", None)


@pytest.fixture
def admin_user(db) -> User:
    return _user("ada-admin", "admin", is_staff=True)  # administrators also use the Django admin


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


@dataclass
class Runtime:
    token: ApiToken
    raw: str
    client: APIClient


def make_runtime(name: str = "runtime-a", run_prefix: str = "") -> Runtime:
    from rest_framework.test import APIClient

    from journals.services import api_token_create

    token, raw = api_token_create(name=name, run_prefix=run_prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Runtime(token=token, raw=raw, client=client)


@pytest.fixture
def runtime(db) -> Runtime:
    """A runtime's API token without a run prefix, and a client that sends it."""
    return make_runtime()
