"""The run page, its event history and one record: what they say, and that they cost the same number of
queries whatever the number of records (10 or 10,000)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from engine.writer import JournalWriter
from journals.models import JournalRecord, Run, Turn
from journals.services import records_ingest
from recovery.services import assessment_refresh
from tests.console.scenarios import SECRET

pytestmark = pytest.mark.django_db


def _html(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def test_the_run_page_summarises_the_run(viewer_pages, pay):
    html = _html(viewer_pages, reverse("console:run", args=[pay.run.pk]))
    assert f"Run <span class=\"mono wrapid\">{pay.run.run_id}</span>" in html
    first = reverse("console:record", args=[pay.run.pk, 0, 0])
    assert f'href="{first}"' in html  # the first record, linked
    assert "Live branch" in html and "branch 1" in html
    assert "Latest assessment" in html and "none yet" not in html.split("Latest assessment")[1][:200]
    counts = html.split('id="state-counts"')[1].split("</ul>")[0]
    assert re.search(r"blocked.*?<strong>2</strong>", counts, re.S)  # t-charge, t-skip
    assert re.search(r"discarded.*?<strong>1</strong>", counts, re.S)  # t-lost
    # The fork: its reason, its record linked, the discarded suffix drawn greyed.
    forks = html.split('id="forks"')[1].split("</ol>")[0]
    assert "operator rewind" in forks and 'href="/runs/' in forks
    assert 'class="gone"' in html and "discarded (kept as evidence)" in html
    assert SECRET not in html


def test_the_grid_shows_each_turn_by_phase(viewer_pages, pay):
    html = _html(viewer_pages, reverse("console:run", args=[pay.run.pk]))
    grid = html.split('id="turn-grid"')[1].split("</section>")[0]
    for turn in ("t-complete", "t-resume", "t-charge", "t-skip", "t-lost", "t-after"):
        assert f'href="{reverse("console:turn", args=[pay.turns[turn].pk])}"' in grid
    # t-complete planned at lsn 0; t-resume resumes at execute, t-charge is held there, t-skip at envelope.
    assert 'title="plan: committed at branch 0 · lsn 1"' in grid
    assert f'href="{reverse("console:record", args=[pay.run.pk, 0, 1])}"' in grid
    assert grid.count('title="execute: resume here"') == 1
    assert grid.count('title="execute: held here (blocked)"') == 1
    assert grid.count('title="envelope: held here (blocked)"') == 1


def test_the_event_history_lists_filters_and_redacts(viewer_pages, pay):
    url = reverse("console:records", args=[pay.run.pk])
    html = _html(viewer_pages, url)
    total = JournalRecord.objects.filter(run=pay.run).count()
    assert f"<strong>{total}</strong> records" in html
    assert SECRET not in html and "[redacted]" in html
    assert html.count('<li id="r') == min(total, 50)
    assert "discarded-row" in html  # t-lost's records on the discarded suffix
    only_forks = _html(viewer_pages, url + "?kind=fork")
    assert "<strong>1</strong> record;" in only_forks and "operator rewind" in only_forks
    charge = _html(viewer_pages, url + "?turn=t-charge")
    assert "t-skip" not in charge and "sent charge-card (unsafe)" in charge
    branch1 = _html(viewer_pages, url + "?branch=1")
    assert 'aria-current="page">branch 1' in branch1
    assert "branch 0 · lsn" not in branch1


def test_a_record_page_links_its_turn_and_neighbours(viewer_pages, pay):
    charge = JournalRecord.objects.filter(run=pay.run, turn="t-charge", kind="intent_dispatched").order_by("seq")[0]
    html = _html(viewer_pages, reverse("console:record", args=[pay.run.pk, charge.branch, charge.lsn]))
    assert f'href="{reverse("console:turn", args=[pay.turns["t-charge"].pk])}"' in html
    assert SECRET not in html and "card_token" in html and "[redacted]" in html
    assert reverse("console:record", args=[pay.run.pk, charge.branch, charge.lsn - 1]) in html
    assert viewer_pages.get(reverse("console:record", args=[pay.run.pk, 0, 99999])).status_code == 404


def test_outsiders_see_no_run_page(outsider_pages, pay):
    for url in (
        reverse("console:run", args=[pay.run.pk]),
        reverse("console:records", args=[pay.run.pk]),
        reverse("console:record", args=[pay.run.pk, 0, 0]),
    ):
        assert outsider_pages.get(url).status_code == 403, url


def _run_of(records: int, run_id: str) -> Run:
    """A run of about ``records`` records: turns of five records each, a fork early on, ingested in batches
    the API accepts and assessed."""
    w = JournalWriter(run_id)
    n = 0
    while n * 5 < records - 1:
        turn = f"t-{n}"
        w.plan(turn, lineage=f"job-{n}")
        for phase in ("plan", "envelope", "dispatch"):
            w.commit(turn, phase)
        w.dispatch(turn, f"i-{n}", "safe", api_key=SECRET)
        n += 1
        if n == 3:
            w.fork(w.next_lsn[w.branch] - 3, reason="operator rewound the speculative batch")
    lines = w.data().splitlines(keepends=True)
    for start in range(0, len(lines), 5000):
        body = b"".join(lines[start : start + 5000])
        records_ingest(run_id=run_id, body=body, content_type="application/x-ndjson", token=None)
    run = Run.objects.get(run_id=run_id)
    assessment_refresh(run=run)
    return Run.objects.get(pk=run.pk)


# Session, user and role (3), then: the run; the run page its branches, fork records, first and last record,
# turn counts by state, latest assessment, the grid's capped count, its turns and their phases, whether it was
# imported (its source words: recovery.imports.selectors.source_words), and the timeline's held turns, latest
# turns, their record spans and their dispatches and readbacks (console.pictures.run_timeline) (14); the
# history its records, branches and the turns its page names (3), and a filtered history its capped count
# (every record is counted by the run itself).
QUERIES = {
    "console:run": {"": 18, "?page=3": 18},
    "console:records": {"": 7, "?page=3&kind=phase_committed": 8, "?turn=t-1&branch=0": 8, "?page=150": 7},
}


def _shown(name: str, html: str) -> int:
    """What a page shows of the run: the grid's turn rows, or the history's records."""
    if name == "console:run":
        return html.split('id="turn-grid"')[1].split("</section>")[0].count('<tr><th scope="row"')
    return html.count('<li id="r')


def test_constant_queries_at_10_and_10000_records(viewer_pages, django_assert_num_queries):
    small = _run_of(10, "small-run")
    large = _run_of(10_000, "large-run")
    assert small.record_count <= 10 and large.record_count >= 10_000
    turns = {run.pk: Turn.objects.filter(run=run).count() for run in (small, large)}
    for name, queries in QUERIES.items():
        for run in (small, large):
            for query in queries:
                # Exactly this many queries (pytest-django's count is exact), the same at 10 and 10,000.
                with django_assert_num_queries(queries[query]):
                    html = _html(viewer_pages, reverse(name, args=[run.pk]) + query)
                assert SECRET not in html
                # And the page shows a full page of what it lists, not an empty one that costs less.
                shown = _shown(name, html)
                if run is small:
                    assert 0 < shown <= (turns[run.pk] if name == "console:run" else run.record_count), (name, query)
                elif query.startswith("?turn="):
                    assert shown == JournalRecord.objects.filter(run=run, turn="t-1", branch=0).count() > 0
                else:
                    assert shown == (25 if name == "console:run" else 50), (name, query)
    # The large run's deep page holds the records of its place in the journal, 7,451 to 7,500.
    html = _html(viewer_pages, reverse("console:records", args=[large.pk]) + "?page=150")
    assert 'id="r7451"' in html and 'id="r7500"' in html and 'id="r7501"' not in html
    # The large run's last page of history is reachable by its number and holds its last record.
    last_page = -(-large.record_count // 50)
    html = _html(viewer_pages, reverse("console:records", args=[large.pk]) + f"?page={last_page}")
    assert f'id="r{large.record_count}"' in html and f'aria-current="page" class="current">{last_page}<' in html
