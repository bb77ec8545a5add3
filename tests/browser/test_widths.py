"""Every console page fits the screen, at a laptop's width (1440 px) and a phone's (375 px): the page never
scrolls sideways; a wide table scrolls inside its own card instead."""

from __future__ import annotations

import os
import re

import pytest

from journals.models import Run
from ops.demo import demo_seed
from recovery.services import assessment_refresh
from tests.browser.conftest import login, make_user, sized_page
from tests.console.scenarios import payments_run

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LISTS = (
    "/",
    "/queue/blocked/",
    "/runs/",
    "/turns/",
    "/turns/?state=held",
    "/findings/?state=all",
    "/packages/",
    "/trail/",
    "/imports/",
    "/effect-maps/",
    "/preferences/",
)


def _links(page, pattern: str) -> list[str]:
    return sorted(set(re.findall(pattern, page.content())))


@pytest.mark.parametrize("width", [1440, 375])
def test_no_console_page_is_wider_than_the_screen(live_server, chromium, width):
    payments_run()
    demo_seed()
    for run in Run.objects.all():
        assessment_refresh(run=run)
    make_user("ada", "admin")
    with sized_page(chromium, width) as page:
        base = live_server.url
        login(page, base, "ada")
        page.goto(f"{base}/runs/?per_page=100")
        runs = _links(page, r'href="(/runs/\d+/)[?"]')
        page.goto(f"{base}/turns/?per_page=100")
        turns = _links(page, r'href="(/turns/\d+/)[?"]')
        assert len(runs) >= 6 and len(turns) >= 15  # the demo's runs and the payments run were read
        pages = [*LISTS, *runs, *(f"{run}records/" for run in runs), *turns]
        wide = []
        for url in pages:
            response = page.goto(f"{base}{url}")
            assert response is not None and response.status == 200, url
            scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            if scroll > inner:
                wide.append(f"{url}: {scroll} px")
        assert wide == [], f"wider than {width} px: {wide}"
        # On a phone the main lists are stacked cards, each value under its column's name; on a laptop, tables.
        shown = "block" if width < 600 else "table-row"
        for url, table in (("/turns/", "#turns-table"), ("/runs/", "#runs-table"), ("/queue/blocked/", "table.list")):
            page.goto(f"{base}{url}")
            row = page.locator(f"{table} tbody tr").first
            assert row.evaluate("r => getComputedStyle(r).display") == shown, url
            if width < 600:
                label = row.locator("td").first.evaluate("td => getComputedStyle(td, '::before').content")
                assert label not in ("none", "normal", ""), url  # the column's name shows above the value
