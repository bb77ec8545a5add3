"""Approve, block and bulk decisions through the pages: recorded by the store's services, CSRF enforced."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from journals.models import Turn
from recovery.models import GateDecision, OperatorEvidence
from tests.console.conftest import page_client
from tests.console.scenarios import many_runs
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def test_approve_records_who_why_and_shows_in_the_history(op_pages, operator, pay):
    turn = pay.turns["t-skip"]
    response = op_pages.post(reverse("console:approve", args=[turn.pk]), {"reason": "the skipped phase is harmless"})
    assert response.status_code == 302
    gate = GateDecision.objects.get(turn=turn)
    assert (gate.kind, gate.actor, gate.reason) == ("approve", operator, "the skipped phase is harmless")
    action = OperatorAction.objects.get(turn=turn)
    assert action.kind == "turn_approve" and action.actor_name == operator.username
    assert action.before["state"] == "hold" and action.after["state"] == "proceed"
    html = op_pages.get(response["Location"]).content.decode()
    assert "Approved turn t-skip" in html
    assert 'approved the turn <code class="code">turn_approve</code>' in html
    assert "the skipped phase is harmless" in html
    assert "proceeds" in html  # the gate's effect, as the store computes it


def test_approving_an_indeterminate_effect_needs_evidence(op_pages, pay):
    turn = pay.turns["t-charge"]
    url = reverse("console:approve", args=[turn.pk])
    response = op_pages.post(url, {"reason": "checked with the bank"})
    assert response.status_code == 400
    assert "This field is required" in response.content.decode()
    assert not GateDecision.objects.filter(turn=turn).exists()
    response = op_pages.post(url, {"reason": "checked with the bank", "evidence_0": "happened"})
    assert response.status_code == 302
    evidence = OperatorEvidence.objects.get(turn=turn)
    assert (evidence.intent_id, evidence.finding) == ("charge-card", "happened")
    assert GateDecision.objects.get(turn=turn).kind == "approve"
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert "Evidence: <strong>happened</strong>" in html


def test_a_reason_is_required(op_pages, pay):
    turn = pay.turns["t-skip"]
    for url in (reverse("console:approve", args=[turn.pk]), reverse("console:block", args=[turn.pk])):
        response = op_pages.post(url, {"reason": "  "})
        assert response.status_code == 400
    assert not GateDecision.objects.exists() and not OperatorAction.objects.exists()


def test_block_holds_a_resumable_turn(op_pages, pay):
    turn = pay.turns["t-resume"]
    response = op_pages.post(
        reverse("console:block", args=[turn.pk]), {"reason": "wait for the vendor", "next": "/turns/?decision=resume"}
    )
    assert response.status_code == 302 and response["Location"] == "/turns/?decision=resume"
    assert GateDecision.objects.get(turn=turn).kind == "block"
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert 'data-state="blocked_operator"' in html and "blocked by olivia-operator" in html
    assert "holds the turn" in html


def test_a_refused_approval_says_why(op_pages, torn):
    response = op_pages.post(reverse("console:approve", args=[torn.turns["t-a"].pk]), {"reason": "please"})
    assert response.status_code == 409
    assert "repaired in the journal" in response.content.decode()
    assert not GateDecision.objects.exists()


def test_next_never_redirects_off_site(op_pages, pay):
    turn = pay.turns["t-resume"]
    response = op_pages.post(reverse("console:block", args=[turn.pk]), {"reason": "hold", "next": "//evil.example/"})
    assert response["Location"].startswith(f"/turns/{turn.pk}/")


def _csrf_token(client, url: str) -> str:
    html = client.get(url).content.decode()
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def test_csrf_is_enforced_on_every_form(operator, pay):
    client = page_client(operator, csrf=True)
    turn = pay.turns["t-resume"]
    posts = [
        reverse("console:block", args=[turn.pk]),
        reverse("console:approve", args=[turn.pk]),
        reverse("console:bulk"),
        reverse("console:preferences"),
        reverse("console:finding_acknowledge", args=[1]),
        reverse("console:finding_resolve", args=[1]),
    ]
    for url in posts:
        assert client.post(url, {"reason": "no token", "zone": "UTC"}).status_code == 403, url
    assert not GateDecision.objects.exists()
    token = _csrf_token(client, reverse("console:turn", args=[turn.pk]))
    response = client.post(
        reverse("console:block", args=[turn.pk]), {"reason": "with token", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    assert GateDecision.objects.get(turn=turn).kind == "block"


def test_bulk_block_confirms_the_count_then_blocks_each_turn(op_pages, operator, db):
    many_runs(4, 2)  # 8 blocked turns
    query = "?decision=blocked&action=block"
    page = op_pages.get(reverse("console:bulk") + query)
    html = page.content.decode()
    assert page.status_code == 200
    assert '<span class="big" id="bulk-count">8</span>' in html
    assert not GateDecision.objects.exists()  # a GET only shows the count
    response = op_pages.post(
        reverse("console:bulk"), {"decision": "blocked", "action": "block", "expected": "8", "reason": "freeze"}
    )
    assert response.status_code == 200
    assert "Blocked 8 turns" in response.content.decode()
    assert GateDecision.objects.filter(kind="block").count() == 8
    assert OperatorAction.objects.filter(kind="turn_block", actor=operator).count() == 8


def test_bulk_asks_again_when_the_filter_changed(op_pages, db):
    many_runs(2, 1)
    response = op_pages.post(
        reverse("console:bulk"), {"decision": "blocked", "action": "block", "expected": "5", "reason": "freeze"}
    )
    assert response.status_code == 409
    assert "changed since you looked" in response.content.decode()
    assert not GateDecision.objects.exists()


def test_bulk_approve_leaves_what_needs_evidence_alone(op_pages, db):
    many_runs(4, 1)  # two phase-prefix turns (approvable), two indeterminate ones (need evidence)
    html = op_pages.get(reverse("console:bulk") + "?decision=blocked&action=approve").content.decode()
    assert '<span class="big" id="bulk-count">4</span>' in html  # every held turn goes to the service
    assert "2 will stay held: they need evidence for an unconfirmed effect." in html
    response = op_pages.post(
        reverse("console:bulk"), {"decision": "blocked", "action": "approve", "expected": "4", "reason": "reviewed"}
    )
    assert response.status_code == 200
    approved = set(GateDecision.objects.filter(kind="approve").values_list("turn__reason", flat=True))
    assert approved == {"phase_prefix_violation"}
    assert Turn.objects.filter(reason="effect_indeterminate").count() == 2
    assert not GateDecision.objects.filter(turn__reason="effect_indeterminate").exists()
    # The turns it left alone are listed, each linked to its page where the evidence is given.
    result = response.content.decode()
    assert "Approved 2 turns" in result and result.count('data-code="evidence_required"') == 2
    for turn in Turn.objects.filter(reason="effect_indeterminate"):
        assert f'href="{reverse("console:turn", args=[turn.pk])}#decide"' in result


def test_bulk_needs_a_filter(op_pages, db):
    many_runs(1, 1)
    response = op_pages.get(reverse("console:bulk") + "?action=block")
    assert response.status_code == 302
    assert not GateDecision.objects.exists()
