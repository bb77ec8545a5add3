"""The API's decisions carry the version of the state their author read: `If-Match` with the decision's ETag.

`GET .../decision` answers the version as `state_version` and as its `ETag`; approve and block take it back
as `If-Match`. A stale one is 409 `state_changed` in the API's error shape, and the gate still holds the
turn. Without `If-Match` a decision is made on the state as it is (runtimes and scripts rely on it).
"""

from __future__ import annotations

import pytest

from recovery.models import GateDecision
from recovery.services import turn_block
from tests.console.scenarios import payments_run
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

TURN = "/api/v1/runs/pay-run-1/turns/t-skip"


def _read(client) -> tuple[str, dict]:
    response = client.get(f"{TURN}/decision")
    assert response.status_code == 200
    body = response.json()
    assert response["ETag"] == f'"{body["state_version"]}"'
    return response["ETag"], body


def test_the_decision_names_its_version_and_a_fresh_one_is_taken(operator_client):
    payments_run()
    etag, body = _read(operator_client)
    assert body["effective"]["state"] == "held_review" and len(body["state_version"]) == 16
    response = operator_client.post(f"{TURN}/approve", {"reason": "reviewed"}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "proceed"
    assert response["ETag"] != etag and response["ETag"] == _read(operator_client)[0]


def test_a_stale_version_is_refused_and_the_gate_still_holds_the_turn(operator_client, admin_user):
    scenario = payments_run()
    etag, _ = _read(operator_client)
    turn_block(turn=scenario.turns["t-skip"], actor=admin_user, reason="second pair of eyes")
    actions = OperatorAction.objects.count()
    response = operator_client.post(f"{TURN}/approve", {"reason": "reviewed"}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "state_changed" and body["line"] is None
    assert "blocked by ada-admin" in body["detail"] and body["detail"].endswith("second pair of eyes")
    assert body["state"]["state"] == "blocked_operator" and f'"{body["state_version"]}"' == _read(operator_client)[0]
    assert OperatorAction.objects.count() == actions
    assert list(GateDecision.objects.values_list("kind", flat=True)) == ["block"]
    gate = _read(operator_client)[1]
    assert (gate["state"], gate["reason"]) == ("hold", "operator_blocked")


def test_a_stale_block_is_refused_and_a_weak_or_bare_tag_is_read_the_same(operator_client, operator):
    scenario = payments_run()
    for spell in (lambda tag: f"W/{tag}", lambda tag: tag.strip('"')):
        given = spell(_read(operator_client)[0])
        response = operator_client.post(f"{TURN}/block", {"reason": "hold"}, format="json", HTTP_IF_MATCH=given)
        assert response.status_code == 200, given
        turn_block(turn=scenario.turns["t-skip"], actor=operator, reason=f"moved on after {given}")
        response = operator_client.post(f"{TURN}/block", {"reason": "hold"}, format="json", HTTP_IF_MATCH=given)
        assert response.status_code == 409 and response.json()["error"] == "state_changed"


def test_without_if_match_the_api_decides_as_before(operator_client, admin_user):
    scenario = payments_run()
    turn_block(turn=scenario.turns["t-skip"], actor=admin_user, reason="second pair of eyes")
    for if_match in ({}, {"HTTP_IF_MATCH": "*"}):
        response = operator_client.post(f"{TURN}/approve", {"reason": "knowingly"}, format="json", **if_match)
        assert response.status_code in (200, 409), response.content
        if response.status_code == 409:
            assert response.json()["error"] == "nothing_to_approve"  # approved by the first round already
    assert GateDecision.objects.filter(kind="approve").count() == 1


def test_if_match_names_one_version(operator_client):
    payments_run()
    etag, _ = _read(operator_client)
    response = operator_client.post(
        f"{TURN}/approve", {"reason": "reviewed"}, format="json", HTTP_IF_MATCH=f"{etag}, {etag}"
    )
    assert response.status_code == 400 and response.json()["error"] == "if_match_invalid"
    assert not GateDecision.objects.exists()


def test_the_schema_shows_if_match_and_the_etag(operator_client):
    schema = operator_client.get("/api/schema/", {"format": "json"}).json()
    turn = "/api/v1/runs/{run_id}/turns/{turn_id}"
    for action in ("approve", "block"):
        operation = schema["paths"][f"{turn}/{action}"]["post"]
        assert "If-Match" in {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert "ETag" in operation["responses"]["200"]["headers"]
        assert "409" in operation["responses"]
    assert "ETag" in schema["paths"][f"{turn}/decision"]["get"]["responses"]["200"]["headers"]
    assert "state_version" in schema["components"]["schemas"]["Gate"]["properties"]
