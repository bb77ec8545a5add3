"""Each rule has one home, and every reader imports it from there: which states an approval may lift
(recovery/state.py), the effective state decided from its inputs with one coverage check (recovery/state.py),
and one fork-tree layout for the run page and the turn page (console/forktree.py)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from console import forktree, rows, selectors, turn_detail
from console.forktree import LANE_H, LEFT, TOP, WIDTH, lay_out
from journals.models import Decision, TurnState
from recovery import selectors as gate_selectors
from recovery import services, state
from recovery.state import (
    APPROVABLE,
    APPROVABLE_WITH_EVIDENCE,
    APPROVAL_NEEDS,
    OFFER_APPROVE,
    OFFER_WITH_EVIDENCE,
    EngineRow,
    StateValue,
    approval_offer,
    approval_refusal,
    covers,
    turn_state_decide,
)

ROOT = Path(__file__).resolve().parents[2]


def _defined(module: Any) -> set[str]:
    """The names a module defines itself (assigned, or a function or class), not those it imports."""
    names: set[str] = set()
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


# --- Which states an approval may lift ------------------------------------------------------------------


def test_approval_offer_is_the_one_word_on_each_state():
    for value in TurnState:
        offer = approval_offer(str(value))
        if value in APPROVABLE:
            assert offer == OFFER_APPROVE, value
        elif value in APPROVABLE_WITH_EVIDENCE:
            assert offer == OFFER_WITH_EVIDENCE, value
        else:
            assert offer == "", value
    assert approval_offer(None) == ""
    # A state an approval needs something else for is never offered the plain approve button.
    assert not set(APPROVAL_NEEDS) & APPROVABLE
    assert not {TurnState.COMPLETE, TurnState.DISCARDED, TurnState.RESUMING} & (APPROVABLE | APPROVABLE_WITH_EVIDENCE)


def _engine(decision: str, reason: str | None) -> EngineRow:
    return EngineRow(decision=decision, reason=reason, resume_from=None, completed=0)


def _value(turn_state: TurnState, *, needs: tuple[str, ...] = (), reason: str | None = None) -> StateValue:
    return StateValue(turn_state, "hold", Decision.BLOCKED, reason, None, needs_evidence=needs)


@pytest.mark.parametrize(
    ("engine", "value", "code"),
    [
        (_engine(Decision.DISCARDED, None), None, "turn_discarded"),
        (_engine(Decision.BLOCKED, "chain_broken"), _value(TurnState.HELD_JOURNAL), "run_level_violation"),
        (_engine(Decision.BLOCKED, "repair_quarantined"), _value(TurnState.HELD_JOURNAL), "repair_quarantined"),
        (
            _engine(Decision.BLOCKED, "effect_indeterminate"),
            _value(TurnState.HELD_EFFECT, needs=("i1",)),
            "evidence_required",
        ),
        (
            _engine(Decision.RESUME, None),
            _value(TurnState.HELD_INTEGRITY, reason="storage_corruption"),
            "integrity_hold",
        ),
        (_engine(Decision.BLOCKED, "unsafe_redispatch"), _value(TurnState.HELD_REVIEW), None),
    ],
)
def test_approval_refusal_names_each_refusal_once(engine, value, code):
    refusal = approval_refusal(row=engine, value=value)
    assert (refusal.code if refusal else None) == code
    if code == "evidence_required":
        assert refusal is not None and refusal.extra == {"intents": ["i1"]}


def test_the_services_pages_and_rows_read_the_approval_rule_from_recovery_state():
    assert selectors.APPROVAL_NEEDS is state.APPROVAL_NEEDS
    assert turn_detail.approval_offer is state.approval_offer
    assert rows.approval_offer is state.approval_offer
    assert services.approval_refusal is state.approval_refusal
    # Nobody keeps a copy of their own.
    for module in (selectors, turn_detail, rows, services, gate_selectors):
        copies = _defined(module) & {"APPROVABLE", "LEFT_ALONE", "OFFER_APPROVAL", "_approvable", "approval_covers"}
        assert not copies, (module.__name__, copies)
    text = (ROOT / "console" / "rows.py").read_text()
    assert '"held_review", "blocked_operator", "parked"' not in text and 'key == "held_effect"' not in text


def test_the_bulk_confirmation_counts_what_the_state_says_an_approval_needs():
    assert [words for _, words in APPROVAL_NEEDS.items()] == [
        "need evidence for an unconfirmed effect",
        "need a repaired journal",
        "need their integrity finding resolved",
    ]
    assert set(APPROVAL_NEEDS) == {TurnState.HELD_EFFECT, TurnState.HELD_JOURNAL, TurnState.HELD_INTEGRITY}


# --- The effective state from its inputs, with one coverage check -------------------------------------------


def test_one_coverage_check_reads_the_facts_only_when_the_reason_matches():
    approval = SimpleNamespace(
        kind="approve",
        engine_reason="unsafe_redispatch",
        engine_facts=[["x", 0, 3]],
        actor_name="olivia",
        created_at=None,
        reason="checked the ledger",
    )
    engine = _engine(Decision.BLOCKED, "unsafe_redispatch")
    read: list[int] = []

    def facts() -> list[list[Any]]:
        read.append(1)
        return [["x", 0, 3]]

    assert covers(approval, engine, facts) is True
    assert covers(approval, _engine(Decision.BLOCKED, "other"), facts) is False
    assert covers(None, engine, facts) is False
    assert read == [1], "the facts are read once, where the reason alone does not answer"
    value = turn_state_decide(
        plan=["a", "b"], engine=engine, operator=approval, facts=facts, indeterminate=(), integrity=None
    )
    assert (value.state, value.gate, value.resume_from) == (TurnState.APPROVED, "proceed", "a")


def test_the_gate_and_the_writer_decide_through_the_one_function():
    for module in (gate_selectors, state):
        text = Path(module.__file__).read_text()
        assert "turn_state_decide(" in text, module.__name__
    assert "turn_state_compute(" not in Path(gate_selectors.__file__).read_text()
    # turn_state_compute is called once, inside turn_state_decide.
    assert Path(state.__file__).read_text().count("turn_state_compute(") == 2  # its definition and one call


# --- One fork-tree layout --------------------------------------------------------------------------------


def _branch(number: int, parent: int | None, from_lsn: int | None, last_lsn: int, live: bool) -> Any:
    return SimpleNamespace(
        number=number,
        parent=parent,
        from_lsn=from_lsn,
        fork_lsn=None if parent is None else last_lsn,
        last_lsn=last_lsn,
        discarded_from=None,
        live=live,
        record_count=last_lsn + 1,
    )


def test_the_turn_page_draws_the_run_pages_fork_tree():
    assert turn_detail.lay_out is forktree.lay_out
    layout = {"LANE_H", "LEFT", "RIGHT", "TOP", "WIDTH", "ForkTree", "TreeLane"}
    assert not _defined(turn_detail) & layout, "the turn page keeps no layout of its own"
    branches = [_branch(0, None, None, 4, False), _branch(1, 0, 0, 2, True)]
    tree = lay_out(branches, records_url="/runs/1/records/", mark=(1, 1), turn_lane=1)
    by_number = {lane.number: lane for lane in tree.lanes}
    # A branch forked after lsn 0 starts one position in: its lsn 0 right after its parent's lsn 0.
    assert by_number[1].x0 > by_number[0].x0 == LEFT
    assert [lane.y for lane in tree.lanes] == [TOP, TOP + LANE_H]
    assert tree.marker is not None and tree.marker[1] == by_number[1].y
    assert by_number[1].x0 < tree.marker[0] < by_number[1].x1 <= WIDTH
    assert tree.turn_lane == 1 and by_number[1].url == "/runs/1/records/?branch=1"
