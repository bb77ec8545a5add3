"""The gate never answers 5xx for a journal ingest accepted: every violation the engine knows, put through
ingest (as evidence, without LoopX-Expect), and the gate asked for every turn ingest lists, including a turn
whose own `turn_planned` line is not a valid record (the engine then knows no such turn: it is blocked with
the run's reason)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine import RUN_LEVEL, Code
from journals.models import Run, Turn, TurnEffective
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db


def _base() -> JournalBuilder:
    b = JournalBuilder()
    b.plan("t1")
    b.commit("t1", "plan")
    return b


def _with(build: Callable[[JournalBuilder], object]) -> JournalBuilder:
    b = _base()
    build(b)
    return b


# One journal per violation the engine names that ingest stores (a line that is not one JSON object, and a
# record of another run, are refused at the door and never stored).
CASES: dict[str, Callable[[], JournalBuilder]] = {
    "record_invalid/float": lambda: _with(lambda b: b.plan("t2", cost=1.5)),
    "record_invalid/at": lambda: _with(lambda b: b.record("turn_planned", turn="t2", lineage="x", at="yesterday")),
    "record_invalid/phases": lambda: _with(lambda b: b.plan("t2", phases=[])),
    "record_invalid/fields": lambda: _with(lambda b: b.record("phase_committed", turn="t1")),
    "lsn_gap": lambda: _with(lambda b: (b._next_lsn.__setitem__(0, 5), b.plan("t2"))),
    "chain_broken": lambda: _with(lambda b: b.record("turn_planned", turn="t2", lineage="x", prev="0" * 64)),
    "schema_unsupported": lambda: _with(lambda b: b.record("turn_planned", turn="t2", lineage="x", v=3)),
    "schema_regression": lambda: _with(lambda b: b.record("turn_planned", turn="t2", stages=["plan"], v=1)),
    "kind_unknown": lambda: _with(lambda b: b.record("turn_plan", turn="t2", lineage="x")),
    "fork_invalid": lambda: _with(lambda b: b.record("turn_planned", branch=4, turn="t2", lineage="x")),
    "checkpoint_mismatch": lambda: _with(lambda b: b.record("checkpoint", covers_lsn=0, state_digest="0" * 64)),
    "unknown_turn": lambda: _with(lambda b: b.commit("t9", "plan")),
    "lineage_missing": lambda: _with(lambda b: b.plan("t2", lineage="")),
    "lineage_conflict": lambda: _with(lambda b: b.plan("t1", lineage="other")),
    "phase_prefix_violation": lambda: _with(lambda b: b.commit("t1", "dispatch")),
    "intent_unknown": lambda: _with(lambda b: b.observe("t1", "i9")),
    "intent_conflict": lambda: _with(
        lambda b: (b.dispatch("t1", "i1"), b.dispatch("t1", "i1", effect_class="idempotent", idempotency_key="k"))
    ),
    "unsafe_redispatch": lambda: _with(
        lambda b: (b.dispatch("t1", "i1", effect_class="unsafe"), b.dispatch("t1", "i1", effect_class="unsafe"))
    ),
    "idempotency_key_missing": lambda: _with(lambda b: b.dispatch("t1", "i1", effect_class="idempotent")),
    "status_phase_mismatch": lambda: _with(lambda b: b.terminal("t1")),
    "effect_indeterminate": lambda: _with(lambda b: b.dispatch("t1", "i1", effect_class="unsafe")),
}


def test_the_cases_cover_every_violation_ingest_can_store():
    named = {name.split("/")[0] for name in CASES}
    refused_at_the_door = {Code.STORAGE_CORRUPTION, Code.RUN_MISMATCH}
    found_after_reading = {Code.OFFSET_MISMATCH}  # the gate's ?expect: asked below
    assert set(Code) - refused_at_the_door - found_after_reading <= named | {"effect_indeterminate"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_gate_answers_every_turn_of_every_violation(runtime, case):
    b = CASES[case]()
    answer = runtime.client.post("/api/v1/runs/run-1/records", b.body(), content_type="application/x-ndjson")
    assert answer.status_code == 200, answer.content
    expected = case.split("/")[0]
    turns = list(Turn.objects.filter(run__run_id="run-1").values_list("turn_id", flat=True))
    assert turns
    for turn in turns:
        for query in ("", "?expect=0:99"):
            gate = runtime.client.get(f"/api/v1/runs/run-1/turns/{turn}/decision{query}")
            assert gate.status_code == 200, (case, turn, gate.content)
            body = gate.json()
            assert body["state"] in ("hold", "proceed", "done")
            if query:
                assert (body["state"], body["reason"]) == ("hold", "offset_mismatch")
            elif expected in RUN_LEVEL:
                assert (body["state"], body["reason"]) == ("hold", expected), (case, turn, body)
    # The gate's GETs wrote nothing; once the worker's task assessed the prefix, every turn has its state,
    # as every page reads it.
    assert not TurnEffective.objects.filter(turn__run__run_id="run-1").exists()
    assessment_refresh(run=Run.objects.get(run_id="run-1"))
    assert TurnEffective.objects.filter(turn__run__run_id="run-1").count() == len(turns)
    if expected not in RUN_LEVEL and expected not in ("effect_indeterminate", "unknown_turn"):  # t9 is no turn
        reasons = set(Turn.objects.filter(run__run_id="run-1").values_list("reason", flat=True))
        assert expected in reasons, (case, reasons)
