"""The overview and a run's page stay true without a reload: within one poll of a decision (an operator's
block) and of new records with their assessment, the overview's tiles, the run page's status badge, its
counts by state and its grid all say what happened."""

from __future__ import annotations

import os
import re

import pytest

from engine.writer import JournalWriter
from journals.models import Run
from journals.services import records_ingest
from recovery.services import assessment_refresh, turn_approve, turn_block
from tests.browser.conftest import login, make_user
from tests.console.scenarios import payments_run

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL_MS = 10_000
WITHIN_A_POLL = POLL_MS + 5_000
PHASES = ("plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend")


def _send(writer: JournalWriter) -> Run:
    """Ingest what the runtime wrote (records already stored are duplicates) and assess it, as the worker does."""
    result = records_ingest(run_id=writer.run, body=writer.data(), content_type="application/x-ndjson", token=None)
    assessment_refresh(run=result.run)
    return Run.objects.get(pk=result.run.pk)


def _wait_text(page, selector: str, pattern: str) -> None:
    """Until the element's text matches: the poll brings it, or the test fails after one poll and a margin."""
    page.wait_for_function(
        "([sel, pat]) => { const el = document.querySelector(sel);"
        " return !!el && new RegExp(pat).test(el.textContent); }",
        arg=[selector, pattern],
        timeout=WITHIN_A_POLL,
    )


def _number(page, selector: str) -> int:
    return int(page.locator(selector).inner_text().strip())


def _run_tile(status: str) -> str:
    return f'[data-run-tile="{status}"] .n'


def _turn_tile(key: str) -> str:
    return f'[data-tile="{key}"] .n'


def _chip(page, state: str) -> int:
    """The run page's count of its turns in ``state`` (0 when it shows no chip for it)."""
    chip = page.locator(f'#state-counts a[href$="state={state}"]')
    if chip.count() == 0:
        return 0
    return int(chip.locator("xpath=..").locator("strong").inner_text())


def test_the_overview_and_a_run_page_follow_a_decision_and_new_records(live_server, chromium, page, shot):
    payments_run()  # needs attention: two turns wait for a person
    w = JournalWriter("live-run")
    w.complete_turn("t-1")
    w.plan("t-2")
    w.commit("t-2", "plan")
    run = _send(w)  # t-2 resumes: the run is running
    make_user("victor", "viewer")
    olivia = make_user("olivia", "operator")
    base = live_server.url

    # The overview in one window, the run's page in another: both stay open, neither reloads.
    login(page, base, "victor")
    page.goto(f"{base}/")
    other = chromium.new_context(viewport={"width": 1400, "height": 900}, timezone_id="Europe/Berlin")
    run_page = other.new_page()
    login(run_page, base, "victor")
    run_page.goto(f"{base}/runs/{run.pk}/")
    for p in (page, run_page):
        p.evaluate("window.notReloaded = true")
    assert _number(page, _run_tile("running")) == 1 and _number(page, _run_tile("needs_attention")) == 1
    assert _number(page, _run_tile("done")) == 0 and _number(page, _turn_tile("blocked_operator")) == 0
    assert run_page.locator("#run-status [data-run-status]").get_attribute("data-run-status") == "running"
    assert _chip(run_page, "resuming") == 1 and _chip(run_page, "complete") == 1
    assert f"Event history ({run.record_count})" in run_page.locator("#run-live").inner_text()

    # (b) A decision: an operator blocks t-2. The run now waits for a person, and both pages say so.
    turn_block(turn=run.turns.get(turn_id="t-2"), actor=olivia, reason="hold for the vendor")
    _wait_text(run_page, "#run-status", "needs attention")
    assert _chip(run_page, "blocked_operator") == 1 and _chip(run_page, "resuming") == 0
    assert "blocked by olivia" in run_page.locator("#turn-grid").inner_text()
    _wait_text(page, _turn_tile("blocked_operator"), "^\\s*1\\s*$")
    assert _number(page, _run_tile("needs_attention")) == 2 and _number(page, _run_tile("running")) == 0
    assert "t-2" in page.locator("#blocked-queue").inner_text()  # the queue in the same answer as the tiles
    shot(run_page, "live-run-page-blocked")

    # (a) New records and their assessment: approved, t-2 commits every phase and ends. The run is done.
    turn_approve(turn=run.turns.get(turn_id="t-2"), actor=olivia, reason="the vendor confirmed")
    for phase in PHASES[1:]:
        w.commit("t-2", phase)
    w.terminal("t-2")
    run = _send(w)
    _wait_text(run_page, "#run-status", "done")
    assert run_page.locator("#run-status [data-run-status]").get_attribute("data-run-status") == "done"
    assert _chip(run_page, "complete") == 2 and _chip(run_page, "blocked_operator") == 0
    assert f"Event history ({run.record_count})" in run_page.locator("#run-live").inner_text()
    t2 = run_page.locator("#turn-grid tr", has=run_page.get_by_role("link", name="t-2"))
    assert t2.locator("td.cell-committed").count() == len(PHASES)
    _wait_text(page, _run_tile("done"), "^\\s*1\\s*$")
    assert _number(page, _run_tile("needs_attention")) == 1 and _number(page, _turn_tile("blocked_operator")) == 0
    assert re.search(r"\bt-2\b", page.locator("#blocked-queue").inner_text()) is None
    shot(page, "live-overview-after")
    for p in (page, run_page):
        assert p.evaluate("window.notReloaded") is True
    other.close()
