"""The admin: every model registered, evidence read-only, a blocked turn's edit recorded with its diff."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from console.models import TurnAnnotation
from journals.models import JournalRecord, TurnState
from recovery.services import assessment_refresh, turn_block
from tests.console.scenarios import SECRET
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_admin(db) -> Client:
    user = User.objects.create_user("ada-staff", password="correct-horse-battery", is_staff=True)
    user.groups.add(Group.objects.get(name="admin"))
    client = Client()
    client.force_login(user)
    return client


def test_every_model_of_our_apps_is_registered():
    for label in ("journals", "trail", "recovery", "audits", "console"):
        for model in apps.get_app_config(label).get_models():
            assert admin.site.is_registered(model), model


@pytest.mark.parametrize(
    "label, name",
    [
        ("journals", "journalrecord"),
        ("trail", "operatoraction"),
        ("recovery", "recoveryaudit"),
        ("recovery", "recoveryauditaction"),
        ("recovery", "recoverydivergence"),
    ],
)
def test_evidence_and_the_audit_trail_are_read_only(rf, label, name):
    model = apps.get_model(label, name)
    model_admin = admin.site._registry[model]
    request = rf.get("/")
    request.user = User(is_superuser=True, is_staff=True)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)


def test_admin_pages_never_show_secrets(staff_admin, pay):
    record = JournalRecord.objects.filter(run=pay.run, kind="intent_dispatched").first()
    urls = [
        reverse("admin:journals_journalrecord_changelist"),
        reverse("admin:journals_journalrecord_change", args=[record.pk]),
        reverse("admin:journals_turn_change", args=[pay.turns["t-charge"].pk]),
        reverse("admin:recovery_assessment_changelist"),
    ]
    for url in urls:
        response = staff_admin.get(url)
        assert response.status_code == 200, url
        assert SECRET not in response.content.decode(), url
    assert "[redacted]" in staff_admin.get(urls[1]).content.decode()


def test_editing_a_blocked_turn_is_recorded_with_the_diff(staff_admin, pay):
    turn = pay.turns["t-skip"]
    url = reverse("admin:journals_turn_change", args=[turn.pk])
    response = staff_admin.post(
        url,
        {
            "lineage_repair": "job-10-repaired",
            "notes": "called the team",
            "block_turn": "",
            "change_reason": "the writer lost the lineage",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    annotation = TurnAnnotation.objects.get(turn=turn)
    assert (annotation.lineage_repair, annotation.notes) == ("job-10-repaired", "called the team")
    action = OperatorAction.objects.get(turn=turn, kind="turn_edit")
    assert action.actor_name == "ada-staff" and action.reason == "the writer lost the lineage"
    assert action.before == {"engine_lineage": "job-10", "lineage_repair": "", "notes": ""}
    assert action.after == {"engine_lineage": "job-10", "lineage_repair": "job-10-repaired", "notes": "called the team"}
    turn.refresh_from_db()
    assert turn.lineage == "job-10"  # the engine's projection is never edited
    # A second edit records only what changed.
    staff_admin.post(
        url,
        {"lineage_repair": "job-10-repaired", "notes": "called the ETL owner", "change_reason": "x1"},
    )
    second = OperatorAction.objects.filter(turn=turn, kind="turn_edit").order_by("-id").first()
    assert second.before == {"engine_lineage": "job-10", "notes": "called the team"}
    assert second.after == {"engine_lineage": "job-10", "notes": "called the ETL owner"}
    # And the console shows both the annotation and the history entry.
    html = staff_admin.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert "job-10-repaired" in html and 'edited the turn&#x27;s notes <code class="code">turn_edit</code>' in html


def test_blocking_from_the_admin_is_the_operators_block(staff_admin, pay, operator_client):
    """The admin's block is recovery.services.turn_block: the gate holds the turn, the state says who."""
    turn = pay.turns["t-resume"]
    url = reverse("admin:journals_turn_change", args=[turn.pk])
    before = _gate(operator_client, turn)
    assert before["state"] == "proceed"
    response = staff_admin.post(
        url, {"lineage_repair": "", "notes": "", "block_turn": "Hold until ETL owner confirms", "change_reason": "x"}
    )
    assert response.status_code == 302
    action = OperatorAction.objects.get(turn=turn, kind="turn_block")
    assert action.actor_name == "ada-staff" and action.reason == "Hold until ETL owner confirms"
    after = _gate(operator_client, turn)
    assert (after["state"], after["reason"]) == ("hold", "operator_blocked")
    html = staff_admin.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert 'data-state="blocked_operator"' in html and "blocked by ada-staff" in html
    assert "proceeds" not in html.split('id="gate-effect"')[1].split("</p>")[0]


def _gate(client, turn):
    return client.get(f"/api/v1/runs/{turn.run.run_id}/turns/{turn.turn_id}/decision").json()


def test_a_finished_turn_cannot_be_edited(staff_admin, pay):
    url = reverse("admin:journals_turn_change", args=[pay.turns["t-complete"].pk])
    response = staff_admin.post(url, {"notes": "x", "change_reason": "y"})
    assert response.status_code == 403
    assert not OperatorAction.objects.filter(kind="turn_edit").exists()


def test_the_admin_shows_and_filters_the_state_people_see(staff_admin, pay, operator):
    """An operator-blocked turn reads "blocked by an operator" in the admin, as on every page, where the
    engine's decision alone would say "resume"; the list filters by that state."""
    assessment_refresh(run=pay.run)
    blocked = pay.turns["t-resume"]  # the engine says resume
    assert blocked.decision == "resume"
    turn_block(turn=blocked, actor=operator, reason="second pair of eyes")
    url = reverse("admin:journals_turn_changelist")
    page = staff_admin.get(url).content.decode()
    assert str(TurnState.BLOCKED_OPERATOR.label) in page
    filtered = staff_admin.get(f"{url}?effective__state__exact={TurnState.BLOCKED_OPERATOR}").content.decode()
    assert f">{blocked.turn_id}<" in filtered
    others = [t.turn_id for t in pay.turns.values() if t.pk != blocked.pk]
    assert all(f">{turn_id}<" in page for turn_id in others)
    assert not any(f">{turn_id}<" in filtered for turn_id in others)
    change = staff_admin.get(reverse("admin:journals_turn_change", args=[blocked.pk])).content.decode()
    assert str(TurnState.BLOCKED_OPERATOR.label) in change
