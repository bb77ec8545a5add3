"""One truth for a turn, in a real browser: an operator approves in bulk, blocks, and an admin blocks from
the admin; the turn page tells one state, and the overview's counts and held queue move as they act."""

from __future__ import annotations

import os
import re

import pytest

from journals.models import Run
from journals.services import records_ingest
from ops.demo import run_effects
from recovery.services import assessment_refresh
from tests.browser.conftest import login, make_user
from tests.console.scenarios import payments_run

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _tile(page, key: str) -> int:
    return int(page.locator(f'[data-tile="{key}"] .n').inner_text())


def _one_state(page, state: str) -> None:
    """The page says one thing: the header, the state card and the gate line agree, nothing contradicts."""
    assert page.locator("#turn-state [data-state]").get_attribute("data-state") == state
    assert page.locator("#gate-state [data-state]").get_attribute("data-state") == state
    gate = page.locator("#gate-effect").inner_text()
    held = state not in ("resuming", "finalizing", "approved", "complete", "discarded")
    assert ("holds the turn" in gate) == held and ("proceeds" in gate) == (not held and state != "complete")
    text = page.locator("main").inner_text()
    if held:
        assert "✓ approved" not in text and "resume here" not in text
    assert "Held because" not in text


def test_the_story_of_one_truth(live_server, page, shot):
    pay = payments_run()
    effects = run_effects("effects-run")
    body = b"".join(line + b"\n" for line in effects.lines)
    records_ingest(run_id="effects-run", body=body, content_type="application/x-ndjson", token=None)
    assessment_refresh(run=Run.objects.get(run_id="effects-run"))
    make_user("ada", "admin")
    from django.contrib.auth.models import User

    User.objects.filter(username="ada").update(is_staff=True)
    base = live_server.url
    login(page, base, "ada")

    # The overview: t-charge, t-skip, the effects run's t-charge and t-refund wait for a person.
    waiting = _tile(page, "waiting")
    assert waiting == 4 and _tile(page, "blocked_operator") == 0
    shot(page, "truth-overview-before")

    # Approve everything that waits, in bulk: the unconfirmed effects stay held, listed with their links.
    page.goto(f"{base}/turns/?state=waiting")
    page.get_by_role("link", name="Approve all…").click()
    assert page.locator("#bulk-count").inner_text() == "4"
    left_alone = page.locator("#bulk-left-alone").inner_text()
    assert "3 will stay held: they need evidence for an unconfirmed effect." in left_alone
    page.get_by_label("Reason (recorded on every turn)").fill("Reviewed with the ETL owner.")
    page.get_by_role("button", name=re.compile("Yes, approve")).click()
    page.wait_for_selector("#bulk-left")
    assert "Approved 1 turn" in page.locator("#result-h").inner_text()
    left = page.locator("#bulk-left tbody tr")
    assert left.count() == 3
    assert {left.nth(i).get_attribute("data-code") for i in range(3)} == {"evidence_required"}
    shot(page, "truth-bulk-result")

    # The redispatched refund, left alone: its page says it is held for its unconfirmed effect, nothing else.
    page.get_by_role("link", name="t-refund").click()
    _one_state(page, "held_effect")
    assert "refund-card" in page.locator("#approve-form").inner_text()  # the evidence it needs is asked for
    shot(page, "truth-refund-held")

    # Block a resuming turn: one state, "blocked by ada", and the gate holds it.
    page.goto(f"{base}/turns/{pay.turns['t-resume'].pk}/")
    _one_state(page, "resuming")
    block = page.locator("#block-form")
    block.get_by_label("Reason for blocking").fill("Hold until ETL owner confirms")
    block.get_by_role("button", name="Block").click()
    page.wait_for_selector(".messages")
    _one_state(page, "blocked_operator")
    assert "blocked by ada" in page.locator("#turn-state").inner_text()
    assert "Hold until ETL owner confirms" in page.locator("#decided-by").inner_text()
    assert "held here: blocked by ada" in page.locator("#timeline").inner_text()
    shot(page, "truth-blocked-by-operator")

    # An admin edit that blocks: it is the same block, and the gate holds the turn.
    page.goto(f"{base}/admin/journals/turn/{pay.turns['t-after'].pk}/change/")
    page.locator("#id_notes").fill("owner on holiday")
    page.locator("#id_block_turn").fill("wait for the owner")
    page.locator("#id_change_reason").fill("owner asked")
    page.get_by_role("button", name="Save", exact=True).click()
    page.goto(f"{base}/turns/{pay.turns['t-after'].pk}/")
    _one_state(page, "blocked_operator")
    assert "owner on holiday" in page.locator("#annotation").inner_text()

    # The overview moved: one approved, two blocked by an operator, and the held queue shows them.
    page.goto(f"{base}/")
    assert _tile(page, "waiting") == waiting - 1
    assert _tile(page, "blocked_operator") == 2 and _tile(page, "approved") == 1
    queue = page.locator("#blocked-queue").inner_text()
    assert "t-resume" in queue and "t-after" in queue and "t-refund" in queue and "t-skip" not in queue
    shot(page, "truth-overview-after")
