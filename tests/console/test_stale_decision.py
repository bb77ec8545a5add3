"""The turn page decides on what it showed: its forms carry the state's version, its poll says when the turn
moved, and a decision sent from a page that no longer shows the turn as it is comes back 409 with the
person's reason kept. The row forms and the admin's block carry theirs too."""

from __future__ import annotations

import re
from functools import partial

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from journals.models import TurnEffective
from recovery.models import GateDecision
from recovery.services import turn_approve, turn_block
from recovery.state import state_of, state_version
from tests.console.test_live import DECIDED_TURN_PART_QUERIES
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

_VERSION = re.compile(r'name="state_version" value="([0-9a-f]{16})"')


def _versions(html: str) -> list[str]:
    return _VERSION.findall(html)


def _current(turn) -> str:
    return state_version(state_of(TurnEffective.objects.filter(turn=turn).first()))


def _decided_after(client, turn, moved, *, action: str, reason: str) -> str:
    """A decision sent from a page drawn before ``moved`` changed the turn: its 409 page."""
    seen = _current(turn)
    moved()
    response = client.post(reverse(f"console:{action}", args=[turn.pk]), {"reason": reason, "state_version": seen})
    assert response.status_code == 409
    return response.content.decode()


def test_the_decide_forms_carry_the_version_of_the_state_the_page_shows(op_pages, pay):
    turn = pay.turns["t-skip"]
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert _versions(html) == [_current(turn)] * 2  # the approve form and the block form
    assert f"hx-vals='{{&quot;seen&quot;: &quot;{_current(turn)}&quot;}}'" in html  # and the poll says it


def test_an_approval_from_a_page_that_missed_a_block_is_refused_with_the_reason_kept(op_pages, pay, admin_user):
    turn = pay.turns["t-skip"]
    page = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    seen = _versions(page)[0]
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    typed = "reviewed the out-of-order commit with the owner"
    response = op_pages.post(reverse("console:approve", args=[turn.pk]), {"reason": typed, "state_version": seen})
    assert response.status_code == 409
    html = response.content.decode()
    error = html.split('id="decision-error"')[1].split("</p>")[0]
    assert "the turn changed since you looked: blocked by ada-admin at " in error and "second pair of eyes" in error
    assert 'data-state="blocked_operator"' in html  # the current state, on every part of the page
    assert "blocked the turn" in html.split('id="history"')[1]
    approve = html.split('id="approve-form"')[1].split("</form>")[0]
    assert f">{typed}</textarea>" in approve  # the reason typed is still there
    # The page now shows the block, and says so: its forms carry the version of what it shows.
    assert _versions(html) == [_current(turn)] * 2
    assert GateDecision.objects.filter(turn=turn, kind="approve").count() == 0
    assert not OperatorAction.objects.filter(kind="turn_approve").exists()
    # Sent again from that page, knowingly, the approval goes through.
    again = op_pages.post(
        reverse("console:approve", args=[turn.pk]), {"reason": typed, "state_version": _current(turn)}
    )
    assert again.status_code == 302 and GateDecision.objects.filter(turn=turn).latest("id").kind == "approve"


def test_a_refused_approval_keeps_the_reason_when_the_turn_can_no_longer_be_approved(op_pages, pay, admin_user):
    turn = pay.turns["t-skip"]
    moved = partial(turn_approve, turn=turn, actor=admin_user, reason="approved by someone else")
    html = _decided_after(op_pages, turn, moved, action="approve", reason="mine")
    assert "approved by ada-admin" in html and 'id="approve-form"' not in html
    assert 'id="approve-kept-reason" rows="2" readonly>mine</textarea>' in html


def test_a_stale_block_is_refused_with_its_reason_kept(op_pages, pay, admin_user):
    turn = pay.turns["t-resume"]
    moved = partial(turn_block, turn=turn, actor=admin_user, reason="first")
    block = _decided_after(op_pages, turn, moved, action="block", reason="mine too").split('id="block-form"')[1]
    block = block.split("</form>")[0]
    assert ">mine too</textarea>" in block
    assert GateDecision.objects.filter(turn=turn).count() == 1


def test_a_form_error_keeps_the_version_the_person_saw(op_pages, pay, admin_user):
    """A reason too short is a 400 whatever the turn did; the page it answers keeps the version the person
    decided on, and says the turn moved, so that the next click is refused if they did not look."""
    turn = pay.turns["t-skip"]
    seen = _current(turn)
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    response = op_pages.post(reverse("console:approve", args=[turn.pk]), {"reason": " ", "state_version": seen})
    assert response.status_code == 400
    html = response.content.decode()
    assert _versions(html) == [seen, seen]
    assert "This turn changed since you opened it: blocked by ada-admin" in html


def test_the_poll_redraws_the_page_and_says_when_the_turn_moved(op_pages, pay, admin_user):
    turn = pay.turns["t-skip"]
    url = reverse("console:turn", args=[turn.pk])
    seen = _current(turn)
    poll = {"HX-Request": "true", "HX-Target": "turn-live"}
    part = op_pages.get(url, {"seen": seen}, headers=poll).content.decode()
    assert 'id="turn-changed"' not in part and "No operator has acted on this turn." in part
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    with CaptureQueriesContext(connection) as queries:
        part = op_pages.get(url, {"seen": seen}, headers=poll).content.decode()
    for i in range(3):  # the history grows; the poll's reads do not
        turn_block(turn=turn, actor=admin_user, reason=f"again {i}")
    with CaptureQueriesContext(connection) as again:
        op_pages.get(url, {"seen": seen}, headers=poll)
    assert len(again) == len(queries) <= DECIDED_TURN_PART_QUERIES + 1  # + the blocking record, for this turn
    head = part.split('id="turn-head"')[1].split("</dl>")[0]
    assert 'data-state="blocked_operator"' in head
    banner = part.split('id="decide-changed"')[1].split("</div>")[0]
    assert "This turn changed since you opened it: blocked by ada-admin at " in banner
    assert "second pair of eyes" in banner
    assert 'id="blocking-reason"' in part.split('id="timeline"')[1]  # the engine's own block, still shown
    assert "blocked the turn" in part.split('id="history"')[1]
    assert "state_version" not in part  # the forms are never redrawn by a poll
    # A page drawn after the block carries its version: no banner.
    part = op_pages.get(url, {"seen": _current(turn)}, headers=poll).content.decode()
    assert 'id="turn-changed"' not in part


def test_a_row_form_carries_the_version_of_its_row(op_pages, pay, admin_user):
    url = reverse("console:turns") + "?decision=blocked"
    html = op_pages.get(url).content.decode()
    turn = pay.turns["t-skip"]
    row = html.split(f'action="{reverse("console:block", args=[turn.pk])}"')[1].split("</form>")[0]
    seen = _versions(row)[0]
    assert seen == _current(turn)
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    response = op_pages.post(
        reverse("console:approve", args=[turn.pk]), {"reason": "from the list", "state_version": seen, "next": url}
    )
    assert response.status_code == 409 and GateDecision.objects.filter(turn=turn).count() == 1


def test_the_admins_block_carries_the_version_of_its_page(admin_pages, pay, operator):
    turn = pay.turns["t-resume"]
    url = reverse("admin:journals_turn_change", args=[turn.pk])
    page = admin_pages.get(url).content.decode()
    seen = re.search(r'name="state_version" value="([0-9a-f]{16})"', page).group(1)
    assert seen == _current(turn)
    turn_block(turn=turn, actor=operator, reason="the operator's own hold")
    form = {
        "lineage_repair": "job-8-fixed",
        "notes": "",
        "block_turn": "hold it",
        "change_reason": "x",
        "state_version": seen,
    }
    response = admin_pages.post(url, form, follow=True)
    html = response.content.decode()
    assert "Not saved: the turn changed since you looked: blocked by olivia-operator" in html
    assert "was changed successfully" not in html
    # Nothing written: neither the block nor the annotation that came with it.
    assert GateDecision.objects.filter(turn=turn).count() == 1
    assert not OperatorAction.objects.filter(kind="turn_edit").exists()
    assert OperatorAction.objects.filter(kind="turn_block").count() == 1
    # The page, drawn again, carries the version of the block it now shows: the admin may hold it anyway.
    form["state_version"] = _current(turn)
    admin_pages.post(url, form)
    assert GateDecision.objects.filter(turn=turn).count() == 2
    assert OperatorAction.objects.filter(kind="turn_edit").count() == 1


def test_the_admins_form_without_a_version_blocks_as_before(admin_pages, pay):
    turn = pay.turns["t-resume"]
    url = reverse("admin:journals_turn_change", args=[turn.pk])
    response = admin_pages.post(url, {"block_turn": "hold", "change_reason": "x", "notes": "", "lineage_repair": ""})
    assert response.status_code == 302 and GateDecision.objects.filter(turn=turn, kind="block").exists()
