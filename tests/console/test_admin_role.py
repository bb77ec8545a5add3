"""The admin role opens the Django admin (it is a group, not is_staff) and holds every model's permissions."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User

pytestmark = pytest.mark.django_db

PROJECT_APPS = ("journals", "trail", "recovery", "audits", "console", "notifications", "teams")


def _user(name: str, group: str | None) -> User:
    user = User.objects.create_user(name, password="pw-for-tests-only")
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def test_admin_role_opens_the_admin(client) -> None:
    client.force_login(_user("ada", "admin"))
    assert client.get("/admin/").status_code == 200


@pytest.mark.parametrize("group", ["viewer", "operator", None])
def test_other_roles_do_not(client, group) -> None:
    client.force_login(_user(f"u-{group}", group))
    response = client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_admin_group_covers_every_model_of_the_project() -> None:
    perms = set(Group.objects.get(name="admin").permissions.values_list("content_type__model", "codename"))
    for app_label in PROJECT_APPS:
        for model in apps.get_app_config(app_label).get_models():
            name = model._meta.model_name
            assert (name, f"view_{name}") in perms, f"admin cannot view {app_label}.{name}"


def test_viewers_never_see_token_or_webhook_models() -> None:
    codenames = set(Group.objects.get(name="viewer").permissions.values_list("codename", flat=True))
    assert "view_apitoken" not in codenames
    assert "view_webhook" not in codenames
    assert "view_turn" in codenames
