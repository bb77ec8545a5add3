"""A decision made on a page that missed a change, in a real browser: an operator has a held turn open and is
typing a reason; an admin blocks it; the operator's page shows the block within one poll (header, history,
and a word in the Decide panel) without losing the reason; the operator clicks Approve anyway, from the
page whose forms still carry the version it was opened with, and is refused: the gate still holds."""

from __future__ import annotations

import os

import pytest

from recovery.services import turn_block
from tests.browser.conftest import login, make_user
from tests.console.scenarios import payments_run

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REASON = "Reviewed the out-of-order commit with the ETL owner."


def test_an_approval_over_a_block_the_operator_did_not_see_is_refused(live_server, page, shot, monkeypatch):
    monkeypatch.setattr("console.live.POLL_SECONDS", 1)  # one poll a second: the test waits for one
    turn = payments_run().turns["t-skip"]  # held for review
    make_user("olivia", "operator")
    ada = make_user("ada", "admin")
    base = live_server.url
    login(page, base, "olivia")

    # A opens the held turn and starts writing a reason.
    page.goto(f"{base}/turns/{turn.pk}/")
    assert page.locator("#turn-state [data-state]").get_attribute("data-state") == "held_review"
    assert "No operator has acted on this turn." in page.locator("#history").inner_text()
    approve = page.locator("#approve-form")
    approve.get_by_label("Reason for approving").fill(REASON)

    # B, an admin, blocks it.
    turn_block(turn=turn, actor=ada, reason="second pair of eyes")

    # Within a poll the whole page tells the block: the header, the state card, the history, the banner.
    page.wait_for_selector('#turn-state [data-state="blocked_operator"]', timeout=10_000)
    assert page.locator("#gate-state [data-state]").get_attribute("data-state") == "blocked_operator"
    history = page.locator("#history").inner_text()
    assert "blocked the turn" in history and "by ada," in history and "No operator has acted" not in history
    banner = page.locator("#turn-changed").inner_text()
    assert "This turn changed since you opened it: blocked by ada at " in banner and "second pair of eyes" in banner
    # The reason A was typing is still there, and the form still carries what A saw.
    assert approve.get_by_label("Reason for approving").input_value() == REASON
    # The screenshot hides a text caret with a style of its own, which the page's policy refuses: no caret.
    page.evaluate("document.activeElement.blur()")
    shot(page, "stale-decision-banner")

    # A clicks Approve anyway: refused, the page says what changed, the reason is kept.
    approve.get_by_role("button", name="Approve").click()
    page.wait_for_selector("#decision-error")
    error = page.locator("#decision-error").inner_text()
    assert "the turn changed since you looked: blocked by ada at " in error and "second pair of eyes" in error
    assert page.locator("#approve-form").get_by_label("Reason for approving").input_value() == REASON
    assert page.locator("#turn-state [data-state]").get_attribute("data-state") == "blocked_operator"
    shot(page, "stale-decision-refused")

    # The gate still holds the turn: the block stands.
    gate = page.request.get(f"{base}/api/v1/runs/{turn.run.run_id}/turns/{turn.turn_id}/decision").json()
    assert (gate["state"], gate["reason"]) == ("hold", "operator_blocked")
    assert gate["effective"]["operator"] == "ada"
