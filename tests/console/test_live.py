"""Live refresh: a list's results and a turn's state card are polled by htmx, answered by the page's own
view with the polled part only, at an exact number of queries, and within the reader's rights and runs."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from recovery.services import turn_block
from tests.console.conftest import page_client
from tests.console.scenarios import payments_run

pytestmark = pytest.mark.django_db

# Session, user and role (3), then the list's own reads: the same queries as the full page (test_queries),
# whose rows and count they are.
PARTS = {
    "turns-live": (reverse("console:turns") + "?decision=blocked&per_page=25&page=1", 5),
    "runs-live": (reverse("console:runs") + "?per_page=25", 7),
    "findings-live": (reverse("console:findings") + "?state=all", 5),
}
# The turn page's poll: 3, the turn page's own reads (the turn with its phases and intents, its latest
# assessment row, branches, the run's integrity finding, the worker's lease, checkpoints: 8), the reviewer
# and whom it may go to (2), whether the run was imported (1, its source's words) and the timeline's records
# (1): the whole page but its forms, in one answer.
TURN_PART_QUERIES = 15
DECIDED_TURN_PART_QUERIES = 17  # + the decision in force and the history, as on the page (test_queries)


def _poll(client, url: str, region: str):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, headers={"HX-Request": "true", "HX-Target": region})
    return response, len(ctx.captured_queries)


@pytest.mark.parametrize("region", PARTS)
def test_a_list_polls_its_own_address_and_answers_its_results_only(op_pages, pay, region):
    url, queries = PARTS[region]
    page = op_pages.get(url)
    html = page.content.decode()
    # The page polls its own address, filters and page kept, and offers the pause button.
    assert f'id="{region}" data-live hx-get="{url.replace("&", "&amp;")}" hx-trigger="every 10s"' in html
    assert f'data-live-toggle aria-controls="{region}"' in html
    response, n = _poll(op_pages, url, region)
    assert response.status_code == 200 and n == queries
    part = response.content.decode()
    assert "<html" not in part and "<form method=\"get\"" not in part and 'role="status"' in part
    assert "HX-Request" in response["Vary"] and "HX-Request" in page["Vary"]


def test_the_polled_turns_are_the_pages_rows_with_its_filter(op_pages, pay):
    url, _ = PARTS["turns-live"]
    part = _poll(op_pages, url, "turns-live")[0].content.decode()
    for turn in ("t-charge", "t-skip"):
        assert f">{turn}</a>" in part
    for turn in ("t-resume", "t-complete"):
        assert f">{turn}</a>" not in part  # the filter is the page's: blocked only
    assert f'value="{url}"' in part.replace("&amp;", "&")  # a row's decision comes back to the same list


def test_a_polled_list_changes_when_a_turn_does(op_pages, operator, pay):
    url = reverse("console:turns") + "?state=blocked_operator"
    assert "No turn matches" in _poll(op_pages, url, "turns-live")[0].content.decode()
    turn_block(turn=pay.turns["t-resume"], actor=operator, reason="hold for the vendor")
    assert ">t-resume</a>" in _poll(op_pages, url, "turns-live")[0].content.decode()


def test_a_viewer_polls_without_the_decision_column(viewer_pages, pay):
    url, _ = PARTS["turns-live"]
    part = _poll(viewer_pages, url, "turns-live")[0].content.decode()
    assert ">t-charge</a>" in part and "Decide" not in part and "/approve/" not in part


def test_a_team_polls_only_its_own_runs(blue_operator, red_operator, db):
    payments_run("blue-pay")
    payments_run("red-pay")
    blue = page_client(blue_operator)
    for region in ("turns-live", "runs-live", "findings-live"):
        part = _poll(blue, PARTS[region][0], region)[0].content.decode()
        assert "red-pay" not in part, region
    assert "blue-pay" in _poll(blue, reverse("console:runs"), "runs-live")[0].content.decode()
    red_turn = payments_run("red-pay-2").turns["t-charge"]
    red_url = reverse("console:turn", args=[red_turn.pk])
    assert _poll(blue, red_url, "turn-live")[0].status_code == 404  # another team's turn is a missing one
    assert _poll(page_client(red_operator), red_url, "turn-live")[0].status_code == 200


def test_no_role_no_poll_and_a_signed_out_poll_goes_to_the_login_page(client, outsider_pages, pay):
    url, _ = PARTS["turns-live"]
    assert _poll(outsider_pages, url, "turns-live")[0].status_code == 403
    response = _poll(client, url, "turns-live")[0]
    assert response.status_code == 204 and response["HX-Redirect"].startswith(reverse("login") + "?next=")


def test_the_turn_page_polls_its_state_card(op_pages, operator, pay):
    turn = pay.turns["t-resume"]
    url = reverse("console:turn", args=[turn.pk])
    html = op_pages.get(url).content.decode()
    assert f'id="turn-live" data-live hx-get="{url}" hx-trigger="every 10s"' in html
    response, n = _poll(op_pages, url, "turn-live")
    assert response.status_code == 200 and n == TURN_PART_QUERIES
    part = response.content.decode()
    assert part.lstrip().startswith('<div class="card" aria-live="polite" id="gate-state">')
    assert 'data-state="resuming"' in part and "block-form" not in part and "approve-form" not in part
    # The header, the timeline and the history come with it, each swapped in place (out of band).
    for region in ("turn-head", "timeline", "history", "decide-changed"):
        assert f'id="{region}"' in part, region
        assert 'hx-swap-oob="true"' in part.split(f'id="{region}"')[1].split(">")[0], region
    assert "No operator has acted on this turn." in part and 'id="turn-changed"' not in part
    turn_block(turn=turn, actor=operator, reason="hold for the vendor")
    part = _poll(op_pages, url, "turn-live")[0].content.decode()
    assert 'data-state="blocked_operator"' in part and "hold for the vendor" in part
    history = part.split('id="history"')[1]
    assert "blocked the turn" in history and "No operator has acted" not in history
    assert _poll(op_pages, url, "turn-live")[1] == DECIDED_TURN_PART_QUERIES
    for i in range(5):
        turn_block(turn=turn, actor=operator, reason=f"again {i}")
    assert _poll(op_pages, url, "turn-live")[1] == DECIDED_TURN_PART_QUERIES


def test_a_finished_turn_is_not_polled(op_pages, pay):
    for name in ("t-complete", "t-lost"):  # complete, and discarded by a fork
        html = op_pages.get(reverse("console:turn", args=[pay.turns[name].pk])).content.decode()
        assert 'id="turn-live">' in html and "hx-trigger" not in html.split('id="turn-live"')[1][:40]
        assert "This turn is finished, so its state is not refreshed." in html
        assert "data-live-toggle" not in html


def test_the_pause_button_is_served_with_the_page(op_pages, pay):
    html = op_pages.get(reverse("console:turns")).content.decode()
    assert '<script src="/static/console/live.js" defer></script>' in html
    assert 'aria-pressed="true" hidden>Live refresh: <span class="live-word">on</span>' in html
