"""A turn's review assignment (recovery/assignments/services.py): who takes, hands on and releases a held turn, the
one trail row each act writes, and the inbox of "mine"."""

from __future__ import annotations

import pytest

from recovery.assignments.models import TurnAssignment
from recovery.assignments.services import (
    AssignError,
    assigned_to,
    inbox_count,
    turn_assign,
    turn_unassign,
    with_assignee,
)
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def _rows(kind: str) -> int:
    return OperatorAction.objects.filter(kind=kind).count()


def test_take_hand_on_and_release_each_write_one_trail_row(pay, operator, admin_user):
    turn = pay.turns["t-charge"]
    turn_assign(turn=turn, actor=operator, assignee=operator)
    assert assigned_to(with_assignee(type(turn).objects.filter(pk=turn.pk)).get()) == operator.username
    assert _rows("turn_assign") == 1
    turn_assign(turn=turn, actor=operator, assignee=operator)  # the same reviewer again: nothing changes
    assert _rows("turn_assign") == 1
    turn_assign(turn=turn, actor=operator, assignee=admin_user, reason="the lead knows this card")
    row = OperatorAction.objects.filter(kind="turn_assign").order_by("-seq").first()
    assert row is not None and row.reason == "the lead knows this card"
    assert TurnAssignment.objects.get(turn=turn).assignee == admin_user
    turn_unassign(turn=turn, actor=operator)
    assert not TurnAssignment.objects.filter(turn=turn).exists() and _rows("turn_unassign") == 1
    turn_unassign(turn=turn, actor=operator)  # nobody to release: nothing recorded
    assert _rows("turn_unassign") == 1


def test_a_viewer_may_neither_assign_nor_be_assigned(pay, operator, viewer):
    turn = pay.turns["t-charge"]
    with pytest.raises(AssignError) as refused:
        turn_assign(turn=turn, actor=viewer, assignee=viewer)
    assert refused.value.status == 403
    with pytest.raises(AssignError) as bad:
        turn_assign(turn=turn, actor=operator, assignee=viewer)
    assert bad.value.status == 400 and bad.value.code == "assignee_invalid"
    assert not TurnAssignment.objects.exists() and _rows("turn_assign") == 0


def test_a_finished_turn_needs_no_reviewer(pay, operator):
    with pytest.raises(AssignError) as done:
        turn_assign(turn=pay.turns["t-complete"], actor=operator, assignee=operator)
    assert done.value.status == 409


def test_the_inbox_lists_my_held_turns_and_the_page_says_who_reviews(pay, operator, op_pages):
    turn = pay.turns["t-charge"]
    assert op_pages.post(f"/turns/{turn.pk}/assign/", {"assignee": "me"}).status_code == 302
    assert inbox_count(user=operator) == 1
    assert op_pages.get("/inbox/count/").content == b"1"
    inbox = op_pages.get("/turns/?assignee=me").content.decode()
    assert "t-charge" in inbox and "t-skip" not in inbox
    page = op_pages.get(f"/turns/{turn.pk}/").content.decode()
    assert f"<strong>Assigned to:</strong> {operator.username}" in page
    assert 'id="release-form"' in page and 'id="take-form"' not in page
    assert op_pages.post(f"/turns/{turn.pk}/unassign/").status_code == 302
    assert inbox_count(user=operator) == 0


def test_the_api_assigns_and_releases_through_the_same_service(pay, operator_client, operator):
    url = f"/api/v1/runs/{pay.run.run_id}/turns/t-charge"
    answer = operator_client.post(url + "/assign", {"assignee": operator.username}, format="json")
    assert answer.status_code == 200 and answer.json()["assignee"] == operator.username
    assert operator_client.post(url + "/assign", {"assignee": "nobody-here"}, format="json").status_code == 400
    answer = operator_client.post(url + "/unassign", {}, format="json")
    assert answer.status_code == 200 and answer.json()["assignee"] is None
