"""The admin's blocked-turn edit is one click from the held queue: each queue row links an admin to the turn's
change page in the admin (annotations and block); operators and viewers get no such column."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.console.conftest import page_client

pytestmark = pytest.mark.django_db


def _admin_links(html: str) -> set[str]:
    return set(re.findall(r'href="(/admin/journals/turn/\d+/change/)"', html))


@pytest.mark.parametrize("url_name", ["console:overview", "console:blocked_queue"])
def test_an_admin_opens_each_held_turn_s_admin_page_from_the_queue(pay, admin_user, url_name) -> None:
    html = page_client(admin_user).get(reverse(url_name)).content.decode()
    held = [pay.turns["t-charge"], pay.turns["t-skip"]]
    expected = {reverse("admin:journals_turn_change", args=[t.pk]) for t in held}
    assert _admin_links(html) == expected
    assert '<th scope="col">Admin</th>' in html
    # The link is a real page: the admin's edit of that turn, with its block field.
    change = page_client(admin_user).get(sorted(expected)[0])
    assert change.status_code == 200 and 'name="block_turn"' in change.content.decode()


@pytest.mark.parametrize("persona", ["operator", "viewer"])
@pytest.mark.parametrize("url_name", ["console:overview", "console:blocked_queue"])
def test_operators_and_viewers_see_no_admin_link(pay, request, persona, url_name) -> None:
    html = page_client(request.getfixturevalue(persona)).get(reverse(url_name)).content.decode()
    assert "t-charge" in html  # the queue is there
    assert _admin_links(html) == set()
    assert '<th scope="col">Admin</th>' not in html
