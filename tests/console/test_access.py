"""Who may see and do what on the console's pages: anonymous, outsider, viewer, operator."""

from __future__ import annotations

import pytest
from django.urls import reverse

from recovery.models import GateDecision, OperatorEvidence
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def _pages(pay) -> list[str]:
    turn = pay.turns["t-skip"]
    return [
        reverse("console:overview"),
        reverse("console:turns") + "?decision=blocked",
        reverse("console:runs"),
        reverse("console:turn", args=[turn.pk]),
        reverse("console:blocked_queue"),
        reverse("console:findings"),
        reverse("console:packages"),
        reverse("console:preferences"),
    ]


def _posts(pay) -> list[tuple[str, dict]]:
    skip, charge = pay.turns["t-skip"], pay.turns["t-charge"]
    return [
        (reverse("console:approve", args=[skip.pk]), {"reason": "looks fine to me"}),
        (reverse("console:approve", args=[charge.pk]), {"reason": "it happened", "evidence_0": "happened"}),
        (reverse("console:block", args=[skip.pk]), {"reason": "hold it"}),
        (
            reverse("console:bulk"),
            {"decision": "blocked", "action": "block", "reason": "hold all", "expected": "2"},
        ),
    ]


def _snapshot() -> tuple[int, int, int]:
    return GateDecision.objects.count(), OperatorAction.objects.count(), OperatorEvidence.objects.count()


def test_anonymous_is_sent_to_the_login_page(client, pay):
    for url in _pages(pay):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url
    before = _snapshot()
    for url, data in _posts(pay):
        response = client.post(url, data)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
    assert _snapshot() == before


def test_the_login_page_renders_with_a_labelled_form(client):
    response = client.get("/accounts/login/")
    html = response.content.decode()
    assert response.status_code == 200
    assert '<label for="id_username">' in html and '<label for="id_password">' in html
    assert "csrfmiddlewaretoken" in html


def test_signing_in_with_the_form_lands_on_the_overview(client, operator):
    response = client.post("/accounts/login/", {"username": operator.username, "password": "correct-horse-battery"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_user_without_a_role_gets_403_everywhere(outsider_pages, pay):
    for url in _pages(pay):
        assert outsider_pages.get(url).status_code == 403, url
    before = _snapshot()
    for url, data in _posts(pay):
        assert outsider_pages.post(url, data).status_code == 403, url
    assert _snapshot() == before


def test_a_viewer_reads_every_page_but_sees_no_decision_buttons(viewer_pages, pay):
    for url in _pages(pay):
        assert viewer_pages.get(url).status_code == 200, url
    html = viewer_pages.get(reverse("console:turn", args=[pay.turns["t-skip"].pk])).content.decode()
    assert 'id="approve-form"' not in html and 'id="block-form"' not in html
    assert "approving and blocking need the operator role" in html
    listing = viewer_pages.get(reverse("console:turns")).content.decode()
    assert "rowdecide" not in listing and "Approve all" not in listing


def test_a_forged_post_from_a_viewer_is_403_and_changes_nothing(viewer_pages, pay):
    before = _snapshot()
    for url, data in _posts(pay):
        assert viewer_pages.post(url, data).status_code == 403, url
    assert _snapshot() == before
    # The bulk confirmation page is an operator's page too, even as a GET.
    assert viewer_pages.get(reverse("console:bulk") + "?decision=blocked&action=block").status_code == 403


def test_an_operator_sees_the_buttons(op_pages, pay):
    html = op_pages.get(reverse("console:turn", args=[pay.turns["t-skip"].pk])).content.decode()
    assert 'id="approve-form"' in html and 'id="block-form"' in html
    assert html.count("csrfmiddlewaretoken") >= 3  # approve, block and sign out


def test_a_run_level_fault_offers_no_approval(op_pages, torn):
    html = op_pages.get(reverse("console:turn", args=[torn.turns["t-a"].pk])).content.decode()
    assert 'id="approve-form"' not in html
    assert "cannot be approved" in html
    assert 'id="block-form"' in html


def test_export_is_for_operators_only(op_pages, viewer_pages, pay):
    url = reverse("console:run_export", args=[pay.run.pk])
    assert viewer_pages.get(url).status_code == 403
    response = op_pages.get(url)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    body = b"".join(response.streaming_content)
    assert body[:2] == b"\x1f\x8b"  # gzip


def test_role_checks_use_the_store_access_helper(monkeypatch, viewer_pages, pay):
    """Pages defer to journals.access: revoking there revokes here."""
    from journals import access

    monkeypatch.setattr(access, "can_view", lambda user: False)
    assert viewer_pages.get(reverse("console:overview")).status_code == 403
