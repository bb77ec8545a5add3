"""Live refresh in a real browser: the turns list shows a decision made elsewhere without a reload, and a
person who pauses it keeps the rows they are looking at."""

from __future__ import annotations

import os

import pytest

from recovery.services import turn_block
from tests.browser.conftest import login, make_user
from tests.console.scenarios import payments_run

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL_MS = 10_000


def test_the_turns_list_refreshes_until_paused(live_server, page, shot):
    pay = payments_run()
    make_user("victor", "viewer")
    olivia = make_user("olivia", "operator")
    base = live_server.url
    login(page, base, "victor")
    page.goto(f"{base}/turns/?state=blocked_operator")
    assert "No turn matches" in page.locator("#turns-live").inner_text()
    toggle = page.locator("[data-live-toggle]")
    assert toggle.is_visible() and toggle.get_attribute("aria-pressed") == "true"

    # Another person blocks a turn: the next poll shows it, the page never reloads.
    page.evaluate("window.notReloaded = true")
    turn_block(turn=pay.turns["t-resume"], actor=olivia, reason="hold for the vendor")
    page.locator("#turns-live").get_by_role("link", name="t-resume").wait_for(timeout=POLL_MS + 5_000)
    assert page.evaluate("window.notReloaded") is True
    assert "blocked by olivia" in page.locator("#turns-live").inner_text()

    # Paused: a poll's time passes, and the rows stay as they are.
    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "false" and "paused" in toggle.inner_text()
    turn_block(turn=pay.turns["t-after"], actor=olivia, reason="hold it too")
    page.wait_for_timeout(POLL_MS + 2_000)
    assert "t-after" not in page.locator("#turns-live").inner_text()
    shot(page, "turns-live-paused")

    # On again: the next poll brings it.
    toggle.click()
    page.locator("#turns-live").get_by_role("link", name="t-after").wait_for(timeout=POLL_MS + 5_000)
