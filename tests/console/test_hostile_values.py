"""Values from the database are escaped on every list page: the turns and runs lists and the overview's
blocked queue (rows composed in Python by console/rows.py through format_html, the rest by templates) show
hostile run ids, turn ids, reasons, resume points, lineages and worker names as text, their links carry them
URL-encoded, the pages keep their structure, and each page still costs its fixed number of queries."""

from __future__ import annotations

from html import escape
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audits.heartbeat import heartbeat_record
from console.vocabulary import words_for
from journals.models import Run, Turn, TurnEffective
from tests.console.test_queries import COUNTING, LISTS

pytestmark = pytest.mark.django_db

# Short enough that no list truncates them (the queue cuts run ids at 28 characters), so each must appear
# whole, escaped; every one mixes markup, both quotes, an ampersand and characters outside ASCII.
RUN_ID = "<script>r()</script>\"'&é☃"
TURN_BLOCKED = "<b>t1</b>\"'&ñ𝄞"
TURN_RESUME = "<i>t2</i>'\"&Ω"
REASON = "<img src=x onerror=alert(1)>&\"'ß"
RESUME_FROM = "<svg onload=alert(2)>'\"&ü"
LINEAGE = '<script>alert("l")</script>&\'Ω'
WORKER = "<script>w()</script>\"'&worker-ß"
HOSTILE = (RUN_ID, TURN_BLOCKED, TURN_RESUME, REASON, RESUME_FROM, LINEAGE, WORKER)


class Page(HTMLParser):
    """The elements a page opens, and the turns table's rows (cells and links) as the browser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.rows: list[dict[str, list[str]]] = []
        self._in_tbody = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._in_tbody:
            self.rows.append({"cells": [], "hrefs": []})
        elif tag == "td" and self._in_tbody and self.rows:
            self._cell = []
        elif tag == "a" and self._in_tbody and self.rows:
            self.rows[-1]["hrefs"].append(dict(attrs).get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_tbody = False
        elif tag == "td" and self._cell is not None and self.rows:
            self.rows[-1]["cells"].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


@pytest.fixture
def hostile(db) -> tuple[Run, Turn, Turn]:
    run = Run.objects.create(run_id=RUN_ID, blocked_reason=REASON, assessed_seq=0, record_count=2)
    blocked = Turn.objects.create(
        run=run, turn_id=TURN_BLOCKED, lineage=LINEAGE, decision="blocked", reason=REASON, plan=["plan"]
    )
    resume = Turn.objects.create(
        run=run, turn_id=TURN_RESUME, lineage=LINEAGE, decision="resume", resume_from=RESUME_FROM, plan=["plan"]
    )
    # Their effective states, with the same hostile values (no engine writes such a reason: stored directly).
    TurnEffective.objects.create(
        turn=blocked, run=run, state="held_review", gate="hold", decision="blocked", reason=REASON
    )
    TurnEffective.objects.create(
        turn=resume, run=run, state="resuming", gate="proceed", decision="resume", resume_from=RESUME_FROM
    )
    heartbeat_record(role="worker", name=WORKER)
    return run, blocked, resume


def _get(client, url: str, **headers: str) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, headers=headers)
    assert response.status_code == 200, url
    return response.content.decode(), len(ctx.captured_queries)


def _escaped_only(html: str, *values: str) -> None:
    for value in HOSTILE:
        assert value not in html  # never raw (each holds markup or a quote)
    for value in values:
        assert escape(value, quote=True) in html, value


def _no_injected_markup(page: Page, html: str) -> None:
    # The base page's two scripts (htmx and the live refresh, in the head), the overview's own charts and its
    # held age; no element the values carry.
    assert page.tags.count("script") == 2 == html.count('<script src="/static/')
    assert page.tags.count("svg") == html.count('<svg class="bars"') + html.count('<svg class="heldage"')
    assert not {"img", "b", "i"} & set(page.tags)


def test_the_turns_list_escapes_every_value_and_keeps_its_rows(op_pages, hostile):
    run, blocked, resume = hostile
    url = reverse("console:turns") + "?per_page=100"
    html, queries = _get(op_pages, url)
    assert queries == LISTS[url]
    _escaped_only(html, RUN_ID, TURN_BLOCKED, TURN_RESUME, REASON, RESUME_FROM)
    page = parse(html)
    _no_injected_markup(page, html)
    rows = {r["cells"][0]: r for r in page.rows}
    assert set(rows) == {TURN_BLOCKED, TURN_RESUME}  # the text the browser shows is the value itself
    for turn in (blocked, resume):
        row = rows[turn.turn_id]
        # turn, run, state, step, status, operator, assigned to, updated, decide (operator)
        assert len(row["cells"]) == 9
        assert row["cells"][1] == RUN_ID
        detail, run_link = urlsplit(row["hrefs"][0]), urlsplit(row["hrefs"][1])
        assert detail.path == reverse("console:turn", args=[turn.pk])
        assert parse_qs(detail.query)["back"] == [url]
        assert run_link.path == reverse("console:run", args=[run.pk]) and not run_link.query
    assert rows[TURN_BLOCKED]["cells"][2].endswith(REASON)
    assert rows[TURN_RESUME]["cells"][3] == f"from {RESUME_FROM}"
    assert "Decide on " + TURN_BLOCKED in rows[TURN_BLOCKED]["cells"][8]
    # The row forms post to the turn's own approve and block URLs.
    for turn in (blocked, resume):
        assert f'action="{reverse("console:block", args=[turn.pk])}"' in html
    assert f'formaction="{reverse("console:approve", args=[blocked.pk])}"' in html
    assert f'formaction="{reverse("console:approve", args=[resume.pk])}"' not in html  # nothing to approve
    # A search for the hostile lineage finds both turns and shows the search as text in its field.
    html, queries = _get(op_pages, reverse("console:turns") + "?" + "q=" + "%3Cscript%3Ealert")
    # One query more than a filtered list: the search first names the runs it matches by key.
    assert queries == LISTS[reverse("console:turns") + "?decision=blocked&sort=updated"] + 1
    assert 'value="&lt;script&gt;alert"' in html
    assert len(parse(html).rows) == 2


def test_the_runs_list_escapes_every_value(op_pages, hostile):
    url = reverse("console:runs") + "?per_page=100"
    html, queries = _get(op_pages, url)
    assert queries == LISTS[url]
    _escaped_only(html, RUN_ID, REASON)
    page = parse(html)
    _no_injected_markup(page, html)
    (row,) = page.rows
    assert row["cells"][0] == RUN_ID and row["cells"][1].endswith(REASON)
    assert urlsplit(row["hrefs"][0]).path == reverse("console:run", args=[hostile[0].pk])


def test_the_overview_and_its_blocked_queue_escape_every_value(op_pages, hostile):
    run, blocked, resume = hostile
    url = reverse("console:overview")
    html, queries = _get(op_pages, url)
    assert queries == LISTS[url]  # counting the turns (no count cached yet)
    cached, queries = _get(op_pages, url)
    assert queries == LISTS[url] - COUNTING and cached.count("<tr") == html.count("<tr")  # the counts cached
    _escaped_only(html, TURN_BLOCKED, WORKER)
    page = parse(html)
    _no_injected_markup(page, html)
    queue = [r for r in page.rows if r["hrefs"] == [reverse("console:turn", args=[blocked.pk])]]
    assert len(queue) == 1
    assert queue[0]["cells"][1:3] == [TURN_BLOCKED, RUN_ID]
    held = f"✖ held for review {words_for(REASON)} {REASON}"  # the state's words, the reason's, and the reason
    assert queue[0]["cells"][3] == held
    assert WORKER in [r["cells"][0] for r in page.rows]  # the heartbeats' process name, as text
    # The live refresh renders the same rows (htmx asks for the queue's region)...
    partial, queries = _get(op_pages, reverse("console:blocked_queue"), HX_Request="true", HX_Target="blocked-queue")
    assert queries == LISTS[reverse("console:blocked_queue")]
    assert "<html" not in partial
    # ...and the queue opened by itself is a whole page holding the same rows.
    whole, _ = _get(op_pages, reverse("console:blocked_queue"))
    assert "<html" in whole and "console.css" in whole
    assert [r["cells"][1:4] for r in parse(whole).rows] == [[TURN_BLOCKED, RUN_ID, held]]
    _escaped_only(partial, TURN_BLOCKED, RUN_ID, REASON)
    rows = parse(partial).rows
    assert [r["cells"][1:4] for r in rows] == [[TURN_BLOCKED, RUN_ID, held]]
    assert "script" not in parse(partial).tags
