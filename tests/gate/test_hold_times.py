"""What a hold says of itself: when it began (kept across a change of reason, new after the turn went on),
what it needs (its whole remedy, in order), and that a recovery that did otherwise than planned holds the
turn by the one state rule until an operator approves it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from console.selectors import blocked_queue
from journals.access import EVERY_RUN
from journals.models import Run, Turn, TurnEffective, TurnState
from journals.remedies import REASON_REMEDIES, REMEDIES, remedy_steps
from recovery.services import assessment_refresh
from recovery.state import HELD, RECOVERY_DIVERGED, UNAPPROVABLE_REASONS, state_of
from tests.gate.test_gate import T, claim, close, gate, ingest, open_recovery, report
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db


@pytest.fixture
def journal(runtime) -> JournalBuilder:
    b = JournalBuilder()
    b.plan("mid")
    b.commit("mid", "plan", "envelope")
    b.dispatch("mid", "fetch", effect_class="safe")
    ingest(runtime.client, b)
    return b


def _effective(turn_id: str) -> TurnEffective:
    return TurnEffective.objects.get(turn__turn_id=turn_id)


def _backdate(turn_id: str, minutes: int) -> None:
    """The state's clock moved back, as if the turn had been in it this long."""
    effective = _effective(turn_id)
    TurnEffective.objects.filter(pk=effective.pk).update(since=effective.since - timedelta(minutes=minutes))


def test_held_since_is_the_start_of_the_hold_across_reason_changes(runtime, journal, operator_client):
    """held (operator) -> held (divergence: another state and reason) keeps the start; held -> proceed ->
    held starts again."""
    assert operator_client.post(T.format("mid") + "/block", {"reason": "look first"}, format="json").status_code == 200
    _backdate("mid", 30)
    started = _effective("mid").since
    # The block is lifted by an approval, and at once a recovery that skipped its plan holds it again: the
    # approval lets it go on (proceed), so the new hold starts anew.
    assert operator_client.post(T.format("mid") + "/approve", {"reason": "go on"}, format="json").status_code == 200
    assert _effective("mid").gate == "proceed" and _effective("mid").since > started
    token = claim(runtime.client, "mid").json()["fencing_token"]
    audit = open_recovery(runtime.client, "mid", token).json()["id"]
    assert report(runtime.client, "mid", audit, token, "intent", "surprise").status_code == 201
    held = _effective("mid")
    assert (held.state, held.reason) == (TurnState.HELD_REVIEW, RECOVERY_DIVERGED)
    _backdate("mid", 20)
    began = _effective("mid").since
    # Still held, now by an operator's block (another state, another reason): the start of the hold stays.
    assert operator_client.post(T.format("mid") + "/block", {"reason": "hold on"}, format="json").status_code == 200
    blocked = _effective("mid")
    assert (blocked.state, blocked.since) == (TurnState.BLOCKED_OPERATOR, began)


def test_the_held_queue_orders_by_the_start_of_the_hold(runtime, operator_client):
    b = JournalBuilder()
    b.plan("first")
    b.commit("first", "execute")  # out of order: held for review
    b.plan("second")
    b.commit("second", "plan")
    ingest(runtime.client, b)
    assessment_refresh(run=Run.objects.get(run_id="run-1"))  # the worker's service stores the states
    assert gate(runtime.client, "first")["reason"] == "phase_prefix_violation"
    assert _effective("first").state == TurnState.HELD_REVIEW
    operator_client.post(T.format("second") + "/block", {"reason": "wait"}, format="json")
    _backdate("first", 60)
    _backdate("second", 30)
    # An operator blocks "first" too: another state and reason, the same hold. It keeps its start, so it
    # stays the oldest wait at the head of the queue.
    operator_client.post(T.format("first") + "/block", {"reason": "wait for the owner"}, format="json")
    assert _effective("first").state == TurnState.BLOCKED_OPERATOR
    assert [t.turn_id for t in blocked_queue(scope=EVERY_RUN)] == ["first", "second"]


def test_a_divergence_holds_the_turn_until_an_approval_after_it(runtime, journal, operator_client):
    token = claim(runtime.client, "mid").json()["fencing_token"]
    audit = open_recovery(runtime.client, "mid", token).json()["id"]
    assert report(runtime.client, "mid", audit, token, "phase", "dispatch").status_code == 201
    assert gate(runtime.client, "mid")["state"] == "proceed"  # so far as planned
    assert close(runtime.client, "mid", audit, token).status_code == 200  # the rest of the plan never done
    answer = gate(runtime.client, "mid")
    assert (answer["state"], answer["reason"]) == ("hold", RECOVERY_DIVERGED)
    assert answer["effective"]["state"] == "held_review"
    assert answer["effective"]["remedy"] == list(REASON_REMEDIES[RECOVERY_DIVERGED])
    stored = state_of(_effective("mid"))
    assert stored is not None and (stored.state, stored.reason) == (TurnState.HELD_REVIEW, RECOVERY_DIVERGED)
    # The gate holds it: no new recovery opens over it.
    assert open_recovery(runtime.client, "mid", token).json()["error"] == "turn_blocked"
    approved = operator_client.post(T.format("mid") + "/approve", {"reason": "checked the audit"}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["state"] == "proceed" and _effective("mid").state == TurnState.APPROVED
    # A later divergence holds it again: the approval covered only what came before it.
    audit = open_recovery(runtime.client, "mid", token).json()["id"]
    assert report(runtime.client, "mid", audit, token, "intent", "not-in-the-plan").status_code == 201
    assert _effective("mid").reason == RECOVERY_DIVERGED
    assert Turn.objects.get(turn_id="mid").effective.gate == "hold"


def test_a_recovery_as_planned_leaves_the_turn_going_on(runtime, journal):
    token = claim(runtime.client, "mid").json()["fencing_token"]
    opened = open_recovery(runtime.client, "mid", token).json()
    for item in opened["planned"]:
        assert report(runtime.client, "mid", opened["id"], token, item["kind"], item["target"]).status_code == 201
    assert close(runtime.client, "mid", opened["id"], token).status_code == 200
    assert gate(runtime.client, "mid")["state"] == "proceed"


def test_every_hold_names_its_whole_remedy():
    """Every held state and every reason with a remedy of its own has its steps; an unconfirmed effect names
    each intent, then the approval."""
    for state in HELD:
        assert REMEDIES.get(str(state)), state
    for reason in UNAPPROVABLE_REASONS - set(REASON_REMEDIES):
        assert remedy_steps(state=TurnState.HELD_JOURNAL, reason=reason) == list(REMEDIES[TurnState.HELD_JOURNAL])
    steps = remedy_steps(state=TurnState.HELD_EFFECT, reason="effect_indeterminate", needs_evidence=["a", "b"])
    assert steps == [
        "record what happened to intent a (evidence: happened or not happened)",
        "record what happened to intent b (evidence: happened or not happened)",
        "approve the turn",
    ]
    assert remedy_steps(state=TurnState.HELD_INTEGRITY, reason="chain_broken") == [
        "resolve the run's integrity finding",
        "repair the journal",
    ]
    assert remedy_steps(state=TurnState.RESUMING, reason=None) == []
