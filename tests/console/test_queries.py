"""Every list page costs a fixed number of queries, whatever the number of rows (5 rows or 50)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from console.services import turn_annotate
from journals.models import Run, Turn
from recovery.assignments.services import turn_assign
from recovery.findings.models import Finding
from recovery.recovery_audits.services import recovery_audit_action_report, recovery_audit_open
from recovery.services import turn_approve, turn_block, turn_claim
from tests.console.scenarios import many_runs

pytestmark = pytest.mark.django_db

# Session, user and role (3), then the page's own reads, correlated subqueries inlined: never per row.
# The overview's 8 are with its turn counts cached; recounting them (a turn changed) adds 2.
LISTS = {
    reverse("console:turns") + "?per_page=100": 6,  # + capped count, rows, the person's saved views
    reverse("console:turns") + "?decision=blocked&sort=updated": 6,
    reverse("console:turns") + "?assignee=me": 6,  # the inbox
    # + capped count, rows, turn and state counts of the page, the person's saved views
    reverse("console:runs") + "?per_page=100": 8,
    # + latest turn change, latest state change, 3 counts (held by reason, by state, all turns), queue,
    # actions, heartbeats, findings, the held turns' times for the held age (console.pictures.held_age)
    reverse("console:overview"): 13,
    reverse("console:blocked_queue"): 4,  # + queue
    reverse("console:findings") + "?state=all": 5,
}
# The turn page: 3 + the turn with its phases and intents (3), its latest assessment row (with the
# assessment's violations when the reason is one, and whether the turn has operator decisions, recovery
# audits, operator actions, evidence, an annotation), the blocking record, branches, checkpoints, and the
# gate's run integrity finding and claim, and where an imported intent's class came from (one read, empty
# for a run that was not imported): 13 for a turn nobody has touched yet. What it has adds its reads:
# decisions the decision in force; audits the attempts since the latest approval and the audits with their
# actions and divergences; actions the history; evidence and an annotation their own. Was 24 for any turn.
# The overview's counting queries, which a cached count saves.
COUNTING = 3
QUIET_TURN_PAGE_QUERIES = 16  # the turn's records for the timeline, its reviewer, whom it may go to
TURN_PAGE_QUERIES = 18  # + the decision in force and the history
# Approved and resumed: no blocking record; + attempts, the audits with their actions and divergences (3),
# evidence, the annotation, and the assessment's violations (the gate checks the approval against them).
BUSY_TURN_PAGE_QUERIES = 24


def _rows(n: int, operator) -> None:
    run = many_runs(1, n, prefix=f"q{n}")[0]
    turns = list(Turn.objects.filter(run=run))
    for turn in turns[:2]:  # some rows carry an operator decision (the list's correlated subqueries)
        turn_block(turn=turn, actor=operator, reason="hold for the query test")
    for turn in turns[: n // 2]:  # and half of them a reviewer (joined, never read per row)
        turn_assign(turn=turn, actor=operator, assignee=operator)
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


@pytest.mark.parametrize("url", LISTS)
def test_query_count_is_constant_from_5_to_50_rows(op_pages, operator, url):
    _rows(5, operator)
    small = _count(op_pages, url)
    _rows(50, operator)
    large = _count(op_pages, url)
    assert small == large == LISTS[url], f"{url}: {small} queries with 5 rows, {large} with 50, not {LISTS[url]}"


def test_the_turn_page_has_a_bounded_query_count(op_pages, operator, pay):
    turn = pay.turns["t-charge"]
    url = reverse("console:turn", args=[turn.pk])
    assert _count(op_pages, url) == QUIET_TURN_PAGE_QUERIES
    for i in range(3):
        turn_block(turn=turn, actor=operator, reason=f"hold {i}")
    first = _count(op_pages, url)
    for i in range(10):
        turn_block(turn=turn, actor=operator, reason=f"again {i}")
    assert first == _count(op_pages, url) == TURN_PAGE_QUERIES


def test_a_busy_turn_page_reads_and_shows_everything_it_has(op_pages, operator, pay):
    """What the assessment row's query says a turn has is read and shown: evidence, a recovery audit with
    its actions and divergences, the annotation, the history, the decision in force."""
    turn = pay.turns["t-charge"]
    turn_annotate(turn=turn, actor=operator, changes={"notes": "called the bank"}, reason="context")
    turn_approve(turn=turn, actor=operator, reason="the bank has no charge", evidence={"charge-card": "not_happened"})
    turn.refresh_from_db()
    claim = turn_claim(turn=turn, worker_id="worker-7")
    audit = recovery_audit_open(turn=turn, fencing_token=claim.fencing_token)
    recovery_audit_action_report(audit=audit, fencing_token=claim.fencing_token, kind="phase", target="nowhere")
    url = reverse("console:turn", args=[turn.pk])
    assert _count(op_pages, url) == BUSY_TURN_PAGE_QUERIES
    html = op_pages.get(url).content.decode()
    assert "Evidence: <strong>not happened</strong>" in html
    assert "worker-7" in html and "divergent" in html and "nowhere" in html
    assert "called the bank" in html
    assert "the bank has no charge" in html and "approved" in html


def test_the_overview_counts_are_cached_until_a_turn_changes(op_pages, pay, operator):
    url = reverse("console:overview")
    first = _count(op_pages, url)
    assert _count(op_pages, url) == first - COUNTING  # the counts came from the cache
    html = op_pages.get(url).content.decode()
    assert 'id="counted-at"' in html and "recounted when a turn or a decision changes" in html
    # t-charge (an unconfirmed effect) and t-skip (a phase out of order) wait; t-resume and t-after resume.
    assert _kpi(html, "waiting") == 2 and _kpi(html, "proceeding") == 2 and _kpi(html, "blocked_operator") == 0
    # An operator's block changes the turn's state: the next overview counts again, and the tiles move.
    turn_block(turn=pay.turns["t-resume"], actor=operator, reason="hold for the vendor")
    assert _count(op_pages, url) == first
    html = op_pages.get(url).content.decode()
    assert _kpi(html, "blocked_operator") == 1 and _kpi(html, "proceeding") == 1 and _kpi(html, "waiting") == 2
    assert "3 held" in html


def _kpi(html: str, tile: str) -> int:
    found = re.search(rf'data-tile="{tile}">\s*<span class="n">(\d+)</span>', html)
    assert found, tile
    return int(found.group(1))
