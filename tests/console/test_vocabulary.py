"""Every code the console shows has words a person reads, with the code beside them; and an operator
action's before and after read as the fields that changed, not as two JSON documents."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from console import vocabulary
from console.changes import ABSENT, FieldChange, field_changes
from console.forms import REASON_CHOICES
from console.services import turn_annotate
from engine.types import EFFECT_INDETERMINATE, Code
from journals.models import TurnState
from recovery.findings.models import FINDING_KINDS
from recovery.recovery_audits.models import DIVERGENCE_CODES
from recovery.repair.models import REPAIR_KINDS, REPAIR_QUARANTINED
from recovery.services import turn_approve, turn_block
from recovery.state import FILTER_CHOICES, OPERATOR_BLOCKED, RECOVERY_ATTEMPTS_EXCEEDED, RECOVERY_DIVERGED
from trail.models import OPERATOR_ACTION_KINDS, OperatorAction

# Every reason a turn can be held for: the engine's violations, its one reason that is not a violation,
# the gate's own (a crash loop, a recovery that did otherwise than planned), and a journal repair's.
REASONS = [
    *(str(c) for c in Code),
    EFFECT_INDETERMINATE,
    OPERATOR_BLOCKED,
    RECOVERY_ATTEMPTS_EXCEEDED,
    RECOVERY_DIVERGED,
    REPAIR_QUARANTINED,
]


def _labelled(code: str, table: dict[str, str]) -> None:
    words = table.get(code, "")
    assert words and words != code and words != code.replace("_", " "), f"{code}: no words of its own"
    assert vocabulary.words_for(code) or vocabulary.state_words(code)


@pytest.mark.parametrize("code", REASONS)
def test_every_reason_and_violation_has_words_short_and_long(code):
    _labelled(code, vocabulary.SHORT_REASONS)
    _labelled(code, vocabulary.REASONS)
    assert vocabulary.words_for(code) == vocabulary.SHORT_REASONS[code]


def test_every_reason_the_filter_offers_is_a_known_reason_shown_in_words_and_code():
    offered = [code for code, _ in FILTER_CHOICES["reason"]]
    assert set(offered) == set(REASONS)  # every reason a turn can be held for can be filtered on
    for code, label in REASON_CHOICES[1:]:
        assert label == f"{vocabulary.SHORT_REASONS[code]} ({code})"


@pytest.mark.parametrize(
    ("codes", "table"),
    [
        (OPERATOR_ACTION_KINDS, vocabulary.ACTIONS),
        (FINDING_KINDS, vocabulary.FINDINGS),
        (DIVERGENCE_CODES, vocabulary.DIVERGENCES),
        (REPAIR_KINDS, vocabulary.REPAIRS),
        ([str(s) for s in TurnState], vocabulary.STATES),
    ],
    ids=["trail kinds", "finding kinds", "divergences", "repairs", "states"],
)
def test_every_other_code_family_has_words(codes, table):
    for code in codes:
        _labelled(code, table)


@pytest.mark.django_db
def test_lists_and_the_turn_page_show_a_reason_in_words_beside_its_code(op_pages, pay):
    beside = '<span class="reason-words">phase out of order</span> <code class="reason">phase_prefix_violation</code>'
    assert beside in op_pages.get(reverse("console:turns") + "?decision=blocked").content.decode()
    turn = op_pages.get(reverse("console:turn", args=[pay.turns["t-skip"].pk])).content.decode()
    assert beside in turn
    assert 'The engine blocks it: phase out of order <code class="code">phase_prefix_violation</code>' in turn
    assert 'holds the turn (phase out of order <code class="code">phase_prefix_violation</code>)' in turn
    overview = op_pages.get(reverse("console:overview")).content.decode()
    assert "<title>phase out of order (phase_prefix_violation): 1</title>" in overview
    assert '<option value="phase_prefix_violation">phase out of order (phase_prefix_violation)</option>' in (
        op_pages.get(reverse("console:turns")).content.decode()
    )


@pytest.mark.django_db
def test_the_audit_log_and_the_turn_history_show_what_changed_field_by_field(op_pages, viewer_pages, operator, pay):
    turn = pay.turns["t-skip"]
    turn_annotate(turn=turn, actor=operator, changes={"notes": "called the owner"}, reason="context")
    turn_block(turn=turn, actor=operator, reason="hold for the owner")
    turn_approve(turn=turn, actor=operator, reason="the owner agreed")
    log = viewer_pages.get(reverse("console:trail")).content.decode()
    assert '<strong>approved the turn <code class="code">turn_approve</code></strong>' in log
    assert '<strong>edited the turn&#x27;s notes <code class="code">turn_edit</code></strong>' in log
    assert '<th scope="row"><code class="code">notes</code></th><td class="before wrap"></td>' in log
    assert '<td class="after wrap">called the owner</td>' in log
    assert "engine_lineage" not in log  # the lineage the edit did not change is no change
    assert '<option value="turn_approve">approved the turn (turn_approve)</option>' in log
    page = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    history = page.split('id="history"')[1].split("</section>")[0]
    assert "What changed" in history and 'class="changes small"' in history and "<pre>" not in history


@pytest.mark.django_db
def test_the_admin_shows_an_operator_action_as_field_changes(operator, pay):
    turn_annotate(turn=pay.turns["t-skip"], actor=operator, changes={"notes": "called the owner"}, reason="why")
    action = OperatorAction.objects.get(kind="turn_edit")
    admin = User.objects.create_user("ada-staff", password="correct-horse-battery", is_staff=True)
    admin.groups.add(Group.objects.get(name="admin"))
    client = Client()
    client.force_login(admin)
    html = client.get(reverse("admin:trail_operatoraction_change", args=[action.pk])).content.decode()
    assert '<td class="after wrap">called the owner</td>' in html
    assert "&quot;notes&quot;" not in html and '"notes":' not in html  # no JSON document


def test_field_changes_keep_only_what_moved_and_hide_secrets():
    before = {"username": "ada", "email": "a@x", "password": "old-hash", "teams": ["blue"]}
    after = {"username": "ada", "email": "ada@x", "password": "new-hash", "teams": ["blue", "red"], "active": True}
    assert field_changes(before, after) == [
        FieldChange("email", "a@x", "ada@x"),
        FieldChange("teams", '["blue"]', '["blue", "red"]'),
        FieldChange("active", ABSENT, "true"),
    ]  # the password is redacted on both sides, so it shows no change and no value
    assert field_changes({}, {"name": "x"}) == [FieldChange("name", ABSENT, "x")]
    assert field_changes({"a": 1}, {"a": 1}) == []
