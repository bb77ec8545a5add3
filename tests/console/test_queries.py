"""Every list page costs a fixed number of queries, whatever the number of rows (5 rows or 50)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audits.findings import Finding
from journals.models import Run, Turn
from recovery.services import turn_block
from tests.console.scenarios import many_runs

pytestmark = pytest.mark.django_db

MAX_QUERIES = 12  # session, user, role, counts, the page's rows, subqueries inlined: never per row


def _rows(n: int, operator) -> None:
    run = many_runs(1, n, prefix=f"q{n}")[0]
    turns = list(Turn.objects.filter(run=run))
    for turn in turns[:2]:  # some rows carry an operator decision (the list's correlated subqueries)
        turn_block(turn=turn, actor=operator, reason="hold for the query test")
    # Runs with turns of their own, and findings, so every list has n rows.
    runs = Run.objects.bulk_create([Run(run_id=f"q{n}-extra-{i}") for i in range(n)])
    Turn.objects.bulk_create(
        [Turn(run=r, turn_id="t", decision="resume", resume_from="plan", plan=["plan"]) for r in runs]
    )
    Finding.objects.bulk_create(
        [
            Finding(kind="lost_turn", run=r, subject="t", fact_key=f"k{i}", last_seen=timezone.now())
            for i, r in enumerate(runs)
        ]
    )


def _count(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(ctx.captured_queries)


LISTS = [
    reverse("console:turns") + "?per_page=100",
    reverse("console:turns") + "?decision=blocked&sort=updated",
    reverse("console:runs") + "?per_page=100",
    reverse("console:overview"),
    reverse("console:blocked_queue"),
    reverse("console:findings") + "?state=all",
]


@pytest.mark.parametrize("url", LISTS)
def test_query_count_is_constant_from_5_to_50_rows(op_pages, operator, url, django_assert_max_num_queries):
    _rows(5, operator)
    small = _count(op_pages, url)
    _rows(50, operator)
    with django_assert_max_num_queries(MAX_QUERIES):
        large = _count(op_pages, url)
    assert large == small, f"{url}: {small} queries with 5 rows, {large} with 50"


def test_the_turn_page_has_a_bounded_query_count(op_pages, operator, pay, django_assert_max_num_queries):
    turn = pay.turns["t-charge"]
    for i in range(3):
        turn_block(turn=turn, actor=operator, reason=f"hold {i}")
    url = reverse("console:turn", args=[turn.pk])
    first = _count(op_pages, url)
    for i in range(10):
        turn_block(turn=turn, actor=operator, reason=f"again {i}")
    with django_assert_max_num_queries(40):
        assert _count(op_pages, url) == first
