"""Page numbers: a list says "Page 3 of 41" and links its first, last and nearby pages. Past COUNT_CAP
matches a list's count stops, and a list of the state alone takes its total from the overview's cached
counts; any other filter says "more than" and links up to the next page."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console import selectors
from journals.models import Run, Turn, TurnEffective

pytestmark = pytest.mark.django_db

TURNS = 60  # with 25 a page: 3 pages


@pytest.fixture
def sixty(db) -> None:
    """Sixty turns held for review, stored directly: the pages read rows, not how they came."""
    run = Run.objects.create(run_id="paged-run")
    turns = Turn.objects.bulk_create(
        [Turn(run=run, turn_id=f"turn-{i:02d}", decision="blocked", plan=["plan"]) for i in range(TURNS)]
    )
    TurnEffective.objects.bulk_create(
        [
            TurnEffective(turn=t, run=run, state="held_review", gate="hold", decision="blocked", reason="lsn_gap")
            for t in turns
        ]
    )


def _get(client, url: str) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return response.content.decode(), len(ctx.captured_queries)


def _pager(html: str) -> tuple[str, list[str]]:
    pager = html.split('<nav class="pager"')[1].split("</nav>")[0]
    said = re.search(r'<span class="muted small">(Page [^<]*)</span>', pager)
    assert said
    return said.group(1), re.findall(r"\?[^\"]*page=(\d+)", pager)


def test_a_list_under_the_cap_numbers_its_pages(viewer_pages, sixty):
    html, _ = _get(viewer_pages, reverse("console:turns") + "?per_page=25&page=2")
    said, linked = _pager(html)
    assert said == "Page 2 of 3" and {"1", "3"} <= set(linked)
    assert "<strong>60</strong> turns match; showing 26–50." in html and 'id="counted-at"' not in html


def test_past_the_cap_the_state_alone_is_counted_from_the_cached_counts(viewer_pages, sixty, monkeypatch):
    monkeypatch.setattr(selectors, "COUNT_CAP", 20)
    cache.clear()
    url = reverse("console:turns") + "?per_page=25&page=3"
    # 3 + the capped count, the latest turn and state changes (the counts' key), the three counting
    # queries (nothing cached yet), the rows, the person's saved views.
    html, first = _get(viewer_pages, url)
    said, linked = _pager(html)
    assert said == "Page 3 of 3" and "<strong>60</strong> turns match; showing 51–60." in html
    assert "1" in linked and 'id="counted-at"' in html
    _, cached = _get(viewer_pages, url)
    assert (first, cached) == (11, 8)  # the counts cached: no counting
    # A group of states: its members' counts (every turn here waits for a person).
    html, _ = _get(viewer_pages, reverse("console:turns") + "?state=waiting&per_page=25")
    said, linked = _pager(html)
    assert said == "Page 1 of 3" and "3" in linked and "<strong>60</strong> turns match" in html


def test_past_the_cap_another_filter_says_more_than_and_links_the_next_page(viewer_pages, sixty, monkeypatch):
    monkeypatch.setattr(selectors, "COUNT_CAP", 20)
    html, queries = _get(viewer_pages, reverse("console:turns") + "?q=turn&per_page=25&page=2")
    said, linked = _pager(html)
    assert said == "Page 2" and "3" in linked and "more than 20" in html and 'id="counted-at"' not in html
    # The runs the search matches (named by key), the capped count and no other: the cached counts do not
    # know this filter.
    assert queries == 7
