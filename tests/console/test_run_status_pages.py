"""A run's status in the console: its badge on the runs list, the run page and the overview's tiles, the runs
list filtered (`?status=`) and sorted by it, and the live parts that carry it re-read by their poll."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from journals.models import Run, RunStatus
from recovery.services import turn_block
from tests.console.scenarios import runs_of_each_status
from tests.console.test_run_pages import QUERIES

RUN_PAGE_QUERIES = QUERIES["console:run"]

pytestmark = pytest.mark.django_db

LIVE = {"HX-Request": "true"}


@pytest.fixture
def four_runs(db) -> dict[str, Run]:
    return runs_of_each_status()


def _html(client, url: str, **headers: str) -> str:
    response = client.get(url, headers=headers)
    assert response.status_code == 200, url
    return response.content.decode()


def _listed(html: str) -> list[str]:
    """The runs of a runs list page, in order, each with the status its badge shows."""
    rows = html.split('id="runs-table"')[1].split("</tbody>")[0].split("<tr>")[2:]
    found = []
    for row in rows:
        run_id = re.search(r'class="mono"[^>]*><a href="[^"]+">([^<]+)</a>', row)
        status = re.search(r'data-run-status="(\w+)"', row)
        assert run_id and status, row
        found.append((run_id.group(1), status.group(1)))
    return found


def test_the_runs_list_shows_filters_and_sorts_by_status(viewer_pages, four_runs):
    url = reverse("console:runs")
    listed = dict(_listed(_html(viewer_pages, url)))
    assert listed == {run.run_id: status for status, run in four_runs.items()}
    for status, run in four_runs.items():
        assert _listed(_html(viewer_pages, f"{url}?status={status}")) == [(run.run_id, status)]
    by_status = _listed(_html(viewer_pages, f"{url}?sort=status"))
    assert [status for _, status in by_status] == [str(s) for s in RunStatus]
    # The journal's soundness stays, as the line under the badge: the needs-attention run's journal is sound.
    html = _html(viewer_pages, f"{url}?status=needs_attention")
    assert "journal sound" in html and 'data-run-status="needs_attention"' in html
    assert "journal at fault" in _html(viewer_pages, f"{url}?status=blocked")


def test_the_overview_counts_runs_by_status_with_links_to_the_list(viewer_pages, four_runs):
    html = _html(viewer_pages, reverse("console:overview"))
    for status in RunStatus.values:
        tile = re.search(rf'href="([^"]+)" data-run-tile="{status}">\s*<span class="n">(\d+)</span>', html)
        assert tile, status
        assert tile.group(1) == f"/runs/?status={status}" and tile.group(2) == "1"
    assert "4 runs and" in html


def test_the_overview_poll_answers_its_figures_and_queue_together(viewer_pages, operator, four_runs):
    url = reverse("console:overview")
    part = _html(viewer_pages, url, **LIVE, HX_Target="overview-live")
    assert "<html" not in part and 'data-run-tile="running"' in part and 'data-tile="waiting"' in part
    assert 'id="blocked-queue"' in part and "No operator has acted yet" in part and "Workers and beat" not in part
    # A decision: the next poll's tiles, chart and queue all say so.
    pay = four_runs["needs_attention"]
    turn_block(turn=pay.turns.get(turn_id="t-resume"), actor=operator, reason="hold for the vendor")
    part = _html(viewer_pages, url, **LIVE, HX_Target="overview-live")
    assert re.search(r'data-tile="blocked_operator">\s*<span class="n">1</span>', part)
    assert "t-resume" in part.split('id="blocked-queue"')[1]
    assert "blocked by an operator 1" in part  # the chart's words for its bars
    assert "hold for the vendor" in part.split('id="actions-h"')[1]  # and the decision among the latest actions


def test_the_run_page_poll_answers_its_status_counts_and_grid(viewer_pages, four_runs, django_assert_num_queries):
    done = four_runs["done"]
    url = reverse("console:run", args=[done.pk])
    page = _html(viewer_pages, url)
    assert 'id="run-live"' in page and 'data-run-status="done"' in page
    with django_assert_num_queries(RUN_PAGE_QUERIES[""]):  # the page's reads, no more
        part = _html(viewer_pages, url, **LIVE, HX_Target="run-live")
    assert "<html" not in part and 'id="state-counts"' in part and 'id="turn-grid"' in part
    assert 'id="fork-tree"' in part and "Event history (" in part
    assert 'data-run-status="done"' in part and "state=complete" in part
