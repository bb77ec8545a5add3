"""POST /api/v1/turns/bulk: the console's bulk decision over the API, through the same service, turn by turn."""

from __future__ import annotations

import pytest

from journals.models import Turn
from recovery.models import GateDecision
from tests.console.scenarios import many_runs, payments_run
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

URL = "/api/v1/turns/bulk"


def _post(client, **body):
    return client.post(URL, body, format="json")


def test_bulk_approve_approves_the_others_and_leaves_unconfirmed_effects_held(operator_client, operator):
    many_runs(4, 1)  # two phase-prefix turns (approvable), two unconfirmed unsafe effects (need evidence)
    response = _post(operator_client, action="approve", reason="reviewed", filter={"state": "held"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["action"] == "approve"
    approved = {t["turn"] for t in body["done"]}
    left = {t["turn"]: t for t in body["left"]}
    assert approved == set(Turn.objects.filter(reason="phase_prefix_violation").values_list("turn_id", flat=True))
    assert set(left) == set(Turn.objects.filter(reason="effect_indeterminate").values_list("turn_id", flat=True))
    assert {t["error"] for t in left.values()} == {"evidence_required"}
    # Audited: one decision and one trail row per approved turn, by the operator, with the reason.
    assert GateDecision.objects.filter(kind="approve").count() == 2
    actions = OperatorAction.objects.filter(kind="turn_approve")
    assert actions.count() == 2 and {a.actor_id for a in actions} == {operator.pk}
    assert {a.reason for a in actions} == {"reviewed"}
    # The ones left alone stay held at the gate.
    for name, item in left.items():
        gate = operator_client.get(f"/api/v1/runs/{item['run']}/turns/{name}/decision").json()
        assert gate["state"] == "hold" and gate["effective"]["state"] == "held_effect"


def test_an_unsafe_redispatch_with_an_unknown_outcome_needs_evidence_in_bulk_too(operator_client):
    """The side door: the reason is unsafe_redispatch, not effect_indeterminate, yet the intent is unknown."""
    from journals.models import Run
    from journals.services import records_ingest
    from ops.demo import run_effects
    from recovery.services import assessment_refresh

    demo = run_effects("fx-1")
    body = b"".join(line + b"\n" for line in demo.lines)
    records_ingest(run_id="fx-1", body=body, content_type="application/x-ndjson", token=None)
    assessment_refresh(run=Run.objects.get(run_id="fx-1"))
    response = _post(operator_client, action="approve", reason="looks fine", filter={"reason": "unsafe_redispatch"})
    assert response.status_code == 200
    assert response.json()["done"] == []
    assert [(t["turn"], t["error"]) for t in response.json()["left"]] == [("t-refund", "evidence_required")]
    gate = operator_client.get("/api/v1/runs/fx-1/turns/t-refund/decision").json()
    assert gate["state"] == "hold"
    assert not GateDecision.objects.filter(kind="approve").exists()


def test_bulk_block_blocks_every_open_turn_of_the_filter(operator_client):
    payments_run()
    response = _post(operator_client, action="block", reason="freeze", filter={"run": "pay-run-1"})
    assert response.status_code == 200
    done = {t["turn"] for t in response.json()["done"]}
    open_turns = {t.turn_id for t in Turn.objects.filter(run__run_id="pay-run-1").exclude(effective__gate="done")}
    assert "t-complete" not in open_turns and "t-resume" in open_turns and "t-charge" in open_turns
    assert done == open_turns  # finished and discarded turns are left out: blocking them would change nothing
    assert OperatorAction.objects.filter(kind="turn_block").count() == len(open_turns)


def test_bulk_is_for_operators_only(viewer_client, runtime, operator_client):
    many_runs(1, 1)
    body = {"action": "block", "reason": "freeze", "filter": {"state": "held"}}
    assert viewer_client.post(URL, body, format="json").status_code == 403
    assert runtime.client.post(URL, body, format="json").status_code == 403
    assert not GateDecision.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"action": "approve", "reason": "x", "filter": {}}, 400, "filter_required"),
        ({"action": "launch", "reason": "x", "filter": {"state": "held"}}, 400, "invalid_request"),
        ({"action": "approve", "reason": "", "filter": {"state": "held"}}, 400, "invalid_request"),
        ({"action": "approve", "reason": "x", "filter": {"state": "sleepy"}}, 400, "invalid_request"),
        ({"action": "approve", "reason": "x", "filter": {"state": "held"}, "expected": 7}, 409, "filter_changed"),
    ],
)
def test_bad_bulk_requests_change_nothing(operator_client, body, status, code):
    many_runs(2, 1)
    response = operator_client.post(URL, body, format="json")
    assert response.status_code == status and response.json()["error"] == code
    assert not GateDecision.objects.exists() and not OperatorAction.objects.exists()


def test_too_many_turns_are_refused_whole(operator_client, monkeypatch):
    from recovery import views

    monkeypatch.setattr(views, "BULK_MAX", 1)
    many_runs(2, 1)
    response = _post(operator_client, action="block", reason="x", filter={"state": "held"})
    assert response.status_code == 400 and response.json()["error"] == "too_many"
    assert not GateDecision.objects.exists()
