"""An operator walks from the overview to a run, its event history, a record, its turn, approves it with evidence
and goes back to the run, at desktop
and phone widths: no console error, no request to another host, no page-wide horizontal scroll on a phone."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import login, make_user
from tests.console.scenarios import SECRET, payments_run

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _guarded_page(chromium, width: int):
    context = chromium.new_context(viewport={"width": width, "height": 900}, timezone_id="UTC")
    context.set_default_timeout(15_000)
    foreign: list[str] = []
    errors: list[str] = []

    def route(route_, request) -> None:
        host = urlsplit(request.url).hostname or ""
        if request.url.startswith(("data:", "blob:")) or host in LOOPBACK:
            route_.continue_()
        else:
            foreign.append(request.url)
            route_.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, foreign, errors


def _no_horizontal_scroll(page, where: str) -> None:
    wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"{where}: the page is {wide[0]} px wide in a {wide[1]} px window"


@pytest.mark.parametrize("width", [1440, 375])
def test_overview_run_history_record_turn_and_back(live_server, chromium, shot, width):
    scenario = payments_run()
    make_user("olivia", "operator")
    base = live_server.url
    context, page, foreign, errors = _guarded_page(chromium, width)
    try:
        login(page, base, "olivia")
        shot(page, f"walk-{width}-1-overview")
        page.get_by_role("link", name="Runs", exact=True).click()
        page.get_by_role("link", name=scenario.run.run_id).click()
        page.wait_for_url(f"**/runs/{scenario.run.pk}/")
        assert page.locator("#fork-tree svg.tree").is_visible()
        assert "operator rewind" in page.locator("#forks").inner_text()
        assert page.locator("#turn-grid tbody tr").count() == len(scenario.turns)
        shot(page, f"walk-{width}-2-run")

        page.get_by_role("link", name="Event history").first.click()
        page.wait_for_url(f"**/runs/{scenario.run.pk}/records/")
        first = page.locator("#records li").first
        first.locator("summary").click()
        assert '"kind": "turn_planned"' in first.locator("pre").inner_text()
        shot(page, f"walk-{width}-3-history")

        charge = page.locator("#records li", has_text="sent charge-card").first
        charge.locator("a.where").click()
        page.wait_for_url(f"**/runs/{scenario.run.pk}/records/*/*/")
        assert "[redacted]" in page.locator("#record-fields").inner_text()
        assert SECRET not in page.content()
        shot(page, f"walk-{width}-4-record")

        page.locator("#record-turn").click()
        page.wait_for_url(f"**/turns/{scenario.turns['t-charge'].pk}/")
        assert page.locator("ol.timeline > li").count() == 7
        assert "sent charge-card (unsafe)" in page.locator("#turn-events").inner_text()
        shot(page, f"walk-{width}-5-turn")

        # The charge was sent and its answer lost: the operator checks the bank and approves with evidence.
        form = page.locator("#approve-form")
        form.get_by_label("it did not happen").check()
        form.get_by_label("Reason for approving").fill("The bank shows no charge for this card today.")
        form.get_by_role("button", name="Approve").click()
        page.wait_for_selector(".messages")
        assert "Approved turn t-charge" in page.locator(".messages").inner_text()
        assert "approved by olivia" in page.locator("h1 .badge").inner_text()
        shot(page, f"walk-{width}-6-approved")

        page.locator(".crumbs a.mono").click()
        page.wait_for_url(f"**/runs/{scenario.run.pk}/")
        charge_row = page.locator("#turn-grid tbody tr", has_text="t-charge")
        assert "approved by olivia" in charge_row.inner_text()
        shot(page, f"walk-{width}-7-run-again")

        if width == 375:
            for path in ("/", "/turns/", "/findings/", f"/runs/{scenario.run.pk}/",
                         f"/runs/{scenario.run.pk}/records/", f"/turns/{scenario.turns['t-skip'].pk}/"):
                page.goto(base + path)
                _no_horizontal_scroll(page, path)
            page.goto(base + "/turns/")
            decision = page.locator("#turns-table th", has_text="State")
            assert decision.is_visible() and decision.bounding_box()["x"] + 20 < width
        assert foreign == [], foreign
        assert errors == [], errors
    finally:
        context.close()
