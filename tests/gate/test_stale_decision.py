"""A decision carries the version of the state its author saw: the services refuse it when the turn moved.

`turn_approve` and `turn_block` take ``seen`` (recovery.state.state_version of the state a person looked at).
A stale one is 409 `state_changed`, naming what the turn is now, and nothing is written: no gate decision,
no evidence, no trail row. Every page, the API and the admin compute the version the same way.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from journals.models import Turn, TurnEffective
from recovery.models import GateDecision, OperatorEvidence
from recovery.services import turn_approve, turn_block, turn_decision
from recovery.state import STATE_CHANGED, StateChanged, state_of, state_version
from tests.console.scenarios import payments_run
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def _seen(turn: Turn) -> str:
    """The version the turn's page shows (the stored state, as every page reads it)."""
    return state_version(state_of(TurnEffective.objects.filter(turn=turn).first()))


def test_an_approval_made_on_a_state_that_moved_is_refused_and_writes_nothing(operator, admin_user):
    turn = payments_run().turns["t-skip"]  # held for review
    seen = _seen(turn)
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    decisions, actions = GateDecision.objects.count(), OperatorAction.objects.count()
    with pytest.raises(StateChanged) as refused:
        turn_approve(turn=turn, actor=operator, reason="looks fine", seen=seen)
    err = refused.value
    assert (err.status, err.code) == (409, STATE_CHANGED)
    assert "blocked by ada-admin at " in err.detail and err.detail.endswith(": second pair of eyes")
    assert err.extra["state"]["state"] == "blocked_operator" and err.extra["state_version"] == _seen(turn)
    assert GateDecision.objects.count() == decisions and OperatorAction.objects.count() == actions
    gate = turn_decision(turn=turn)
    assert (gate.gate, gate.reason) == ("hold", "operator_blocked")


def test_a_decision_made_on_the_current_state_goes_through(operator, admin_user):
    turn = payments_run().turns["t-skip"]
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    view = turn_approve(turn=turn, actor=operator, reason="seen the block, approved", seen=_seen(turn))
    assert view.gate == "proceed" and GateDecision.objects.filter(turn=turn).latest("id").kind == "approve"


def test_a_stale_block_is_refused_too(operator, admin_user):
    turn = payments_run().turns["t-skip"]
    seen = _seen(turn)
    turn_approve(turn=turn, actor=admin_user, reason="approved first")
    with pytest.raises(StateChanged) as refused:
        turn_block(turn=turn, actor=operator, reason="hold it", seen=seen)
    assert "approved by ada-admin" in refused.value.detail
    assert list(GateDecision.objects.filter(turn=turn).values_list("kind", flat=True)) == ["approve"]
    assert not OperatorAction.objects.filter(kind="turn_block").exists()
    assert turn_block(turn=turn, actor=operator, reason="hold it", seen=_seen(turn)).gate == "hold"


def test_an_approval_with_evidence_is_checked_against_the_state_before_its_evidence(operator, admin_user):
    """The evidence settles the intent before the turn is locked: the version compared is the one the
    person saw, with the effect still unconfirmed, not the one the evidence makes."""
    turn = payments_run().turns["t-charge"]  # held: effect unconfirmed
    seen = _seen(turn)
    view = turn_approve(
        turn=turn, actor=operator, reason="bank says yes", evidence={"charge-card": "happened"}, seen=seen
    )
    assert view.gate == "proceed"
    other = payments_run("pay-run-2").turns["t-charge"]
    seen = _seen(other)
    turn_block(turn=other, actor=admin_user, reason="the bank is checking")
    with pytest.raises(StateChanged):
        turn_approve(
            turn=other, actor=operator, reason="bank says yes", evidence={"charge-card": "happened"}, seen=seen
        )
    assert not OperatorEvidence.objects.filter(turn=other).exists()  # the evidence went with the refusal


def test_without_seen_nothing_is_checked(operator, admin_user):
    """Runtimes and scripts that send no version decide on the state as it is, as before."""
    turn = payments_run().turns["t-skip"]
    turn_block(turn=turn, actor=admin_user, reason="second pair of eyes")
    assert turn_approve(turn=turn, actor=operator, reason="overrides, knowingly").gate == "proceed"


def test_the_pages_and_the_gate_give_every_turn_the_same_version(operator):
    scenario = payments_run()
    turn_block(turn=scenario.turns["t-resume"], actor=operator, reason="hold")
    for name, turn in scenario.turns.items():
        assert state_version(turn_decision(turn=turn).value) == _seen(turn), name


def test_the_version_moves_exactly_when_what_a_person_sees_does(operator):
    turn = payments_run().turns["t-resume"]
    first = _seen(turn)
    turn_decision(turn=turn)  # a read changes nothing
    assert _seen(turn) == first
    turn_block(turn=turn, actor=operator, reason="hold")
    blocked = _seen(turn)
    turn_block(turn=turn, actor=operator, reason="hold, for another reason")
    assert len({first, blocked, _seen(turn)}) == 3  # who, when and why are part of what a person sees
    assert state_version(None) not in {first, blocked}  # "not yet assessed" has a version of its own


def test_a_decision_made_on_a_turn_not_yet_assessed_is_refused_once_it_is(operator):
    turn = payments_run().turns["t-skip"]
    with pytest.raises(StateChanged) as refused:
        turn_approve(turn=turn, actor=operator, reason="looks fine", seen=state_version(None))
    assert "now held for review" in refused.value.detail


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_decisions_racing_on_the_same_version_exactly_one_is_made(operator, admin_user):
    """The version is compared under the turn's lock: of three people deciding at once on what they all saw,
    over real connections, one decides and the others are told the turn moved."""
    turn = payments_run("race-run").turns["t-resume"]
    people = [operator, admin_user, operator]
    for round_no in range(8):
        made, refused, errors = _race(turn, people, seen=_seen(turn), why=f"round {round_no}")
        assert not errors, errors
        assert (len(made), len(refused)) == (1, len(people) - 1), round_no
    assert GateDecision.objects.filter(turn=turn).count() == 8


def _race(turn: Turn, people: list, *, seen: str, why: str) -> tuple[list[int], list[int], list[BaseException]]:
    """Each person blocks the turn on ``seen`` in a thread of their own, released together by a barrier."""
    barrier = threading.Barrier(len(people))
    made: list[int] = []
    refused: list[int] = []
    errors: list[BaseException] = []

    def decide(i: int) -> None:
        try:
            barrier.wait()
            turn_block(turn=turn, actor=people[i], reason=f"{why}, person {i}", seen=seen)
            made.append(i)
        except StateChanged:
            refused.append(i)
        except BaseException as exc:  # a thread's failure must fail the test
            errors.append(exc)
        finally:
            connections.close_all()  # each thread has its own connection

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(len(people))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return made, refused, errors
