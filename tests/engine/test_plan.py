"""Layer: plans (docs/contract.md sections 2 and 3): turn_planned, the default phases, custom plans,
lineage, and Unicode identifiers."""

from __future__ import annotations

import json

import pytest

from engine import DEFAULT_PHASES, Decision
from tests.engine.helpers import (
    PHASES,
    assert_clean,
    codes,
    commit_through,
    full_turn,
    put,
    run,
    to_json,
    turn,
    writer,
)


def test_the_seven_default_phases_in_causal_order() -> None:
    assert DEFAULT_PHASES == ("plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend")


def test_a_turn_planned_without_phases_gets_the_default_plan_and_resumes_from_plan() -> None:
    w = writer()
    w.plan("t1", "job-1")
    result = run(w)
    assert_clean(result)
    t = turn(result, "t1")
    assert t.phases == DEFAULT_PHASES
    assert (t.decision, t.resume_from, t.reason, t.completed_phases) == (Decision.RESUME, "plan", None, ())
    assert (t.lineage, t.branch) == ("job-1", 0)


@pytest.mark.parametrize("done", range(len(PHASES)))
def test_resume_from_is_the_first_uncommitted_default_phase(done: int) -> None:
    w = writer()
    w.plan("t1")
    for phase in PHASES[:done]:
        w.commit("t1", phase)
    t = turn(run(w), "t1")
    assert (t.decision, t.resume_from, t.completed_phases) == (Decision.RESUME, PHASES[done], tuple(PHASES[:done]))


def test_every_default_phase_committed_is_finalize_and_terminal_is_complete() -> None:
    w = writer()
    w.plan("t1")
    commit_through(w, "t1", "spend")
    t = turn(run(w), "t1")
    assert (t.decision, t.resume_from, t.completed_phases) == (Decision.FINALIZE, None, DEFAULT_PHASES)
    w.terminal("t1")
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").decision == Decision.COMPLETE


def test_a_custom_plan_replaces_the_default() -> None:
    w = writer()
    w.plan("t1", phases=["fetch", "think", "answer"])
    assert turn(run(w), "t1").resume_from == "fetch"
    w.commit("t1", "fetch")
    t = turn(run(w), "t1")
    assert (t.phases, t.resume_from, t.completed_phases) == (("fetch", "think", "answer"), "think", ("fetch",))
    w.commit("t1", "think")
    w.commit("t1", "answer")
    assert turn(run(w), "t1").decision == Decision.FINALIZE
    w.terminal("t1")
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").decision == Decision.COMPLETE


def test_a_one_phase_plan() -> None:
    w = writer()
    w.plan("t1", phases=["only"])
    w.commit("t1", "only")
    assert turn(run(w), "t1").decision == Decision.FINALIZE


def test_a_default_phase_name_is_not_in_a_custom_plan() -> None:
    w = writer()
    w.plan("t1", phases=["fetch", "answer"])
    w.commit("t1", "plan")
    result = run(w)
    assert codes(result) == ["phase_prefix_violation"]
    assert (turn(result, "t1").decision, turn(result, "t1").reason) == (Decision.BLOCKED, "phase_prefix_violation")


@pytest.mark.parametrize(
    "phase", [None, 1, True, ["plan"], {"plan": 1}, ""], ids=["null", "int", "bool", "list", "object", "empty"]
)
def test_a_committed_phase_that_is_not_a_name_is_record_invalid_and_the_next_name_still_commits(
    phase: object,
) -> None:
    w = writer()
    w.plan("t1", "job-1")
    put(w, "phase_committed", turn="t1", phase=phase)  # where the plan's next phase, "plan", is expected
    w.commit("t1", "plan")
    result = run(w)
    assert [(v.code, v.detail, v.lsn) for v in result.violations] == [
        ("record_invalid", "line 2: phase_committed needs a non-empty string phase", 1)
    ]
    assert turn(result, "t1").completed_phases == ("plan",)


@pytest.mark.parametrize(
    "phases",
    [[], ["a", "a"], ["a", "b", "a"], "plan", [1, 2], ["a", None], {"a": 1}, ["a", ""]],
    ids=["empty", "twice", "twice-apart", "string", "ints", "null", "object", "empty-name"],
)
def test_a_malformed_plan_is_record_invalid(phases: object) -> None:
    w = writer()
    full_turn(w, "t0")
    put(w, "turn_planned", turn="t1", lineage="l", phases=phases)
    result = run(w)
    assert codes(result) == ["record_invalid"]
    # record_invalid is run-level: it blocks every turn, including the complete one.
    assert [(t.turn, t.decision.value, t.reason) for t in result.turns] == [("t0", "blocked", "record_invalid")]


@pytest.mark.parametrize("lineage", [None, ""], ids=["absent", "empty"])
def test_a_missing_or_empty_lineage_is_turn_level(lineage: str | None) -> None:
    w = writer()
    full_turn(w, "t0")
    if lineage is None:
        put(w, "turn_planned", turn="t1")
    else:
        put(w, "turn_planned", turn="t1", lineage=lineage)
    result = run(w)
    assert codes(result) == ["lineage_missing"]
    assert (turn(result, "t1").decision, turn(result, "t1").reason) == (Decision.BLOCKED, "lineage_missing")
    assert turn(result, "t1").lineage is None
    # Turn-level: the other turn is untouched.
    assert turn(result, "t0").decision == Decision.COMPLETE


@pytest.mark.parametrize("lineage", [7, ["a"], {"a": "b"}, True])
def test_a_lineage_that_is_not_a_string_is_record_invalid(lineage: object) -> None:
    w = writer()
    full_turn(w, "t0")
    put(w, "turn_planned", turn="t1", lineage=lineage)
    assert codes(run(w)) == ["record_invalid"]


def test_re_planning_with_another_lineage_is_lineage_conflict() -> None:
    w = writer()
    w.plan("t1", "job-1")
    w.commit("t1", "plan")
    w.plan("t1", "job-2")
    result = run(w)
    assert codes(result) == ["lineage_conflict"]
    t = turn(result, "t1")
    assert (t.decision, t.reason, t.lineage) == (Decision.BLOCKED, "lineage_conflict", "job-1")


def test_re_planning_without_lineage_is_lineage_missing() -> None:
    w = writer()
    w.plan("t1", "job-1")
    put(w, "turn_planned", turn="t1")
    assert codes(run(w)) == ["lineage_missing"]


def test_re_planning_with_the_same_lineage_and_plan_is_a_no_op() -> None:
    w = writer()
    w.plan("t1", "job-1")
    w.commit("t1", "plan")
    w.plan("t1", "job-1")
    result = run(w)
    assert_clean(result)
    t = turn(result, "t1")
    assert (t.decision, t.resume_from, t.completed_phases) == (Decision.RESUME, "envelope", ("plan",))


def test_re_planning_with_another_plan_is_a_phase_prefix_violation() -> None:
    w = writer()
    w.plan("t1", "job-1", phases=["a", "b"])
    w.commit("t1", "a")
    w.plan("t1", "job-1", phases=["a", "c"])
    assert codes(run(w)) == ["phase_prefix_violation"]


def test_re_planning_after_the_terminal_record_is_status_phase_mismatch() -> None:
    w = writer()
    full_turn(w, "t1", "job-1")
    w.plan("t1", "job-1")
    result = run(w)
    assert codes(result) == ["status_phase_mismatch"]
    assert turn(result, "t1").reason == "status_phase_mismatch"


@pytest.mark.parametrize("value", [None, "", 5, ["t"]], ids=["absent", "empty", "int", "list"])
def test_turn_planned_needs_a_non_empty_string_turn(value: object) -> None:
    w = writer()
    full_turn(w, "t0")
    if value is None:
        put(w, "turn_planned", lineage="l")
    else:
        put(w, "turn_planned", turn=value, lineage="l")
    assert codes(run(w)) == ["record_invalid"]


def test_turns_are_listed_in_order_of_first_planning_not_by_name() -> None:
    w = writer()
    for name in ["zeta", "alpha", "mu"]:
        w.plan(name)
    w.plan("alpha")  # re-planning does not move it
    assert [t.turn for t in run(w).turns] == ["zeta", "alpha", "mu"]


UNICODE_IDS = ["تحويل-١", "ターン・二", "😀 turn", "e\u0301", "Ω≈ç√", "\u00a0spaced\u2028", "ℌ𝔢𝔩𝔩𝔬"]


@pytest.mark.parametrize("name", UNICODE_IDS)
def test_unicode_identifiers_round_trip_unescaped(name: str) -> None:
    w = writer(run=f"run-{name}")
    w.plan(name, f"lineage-{name}", phases=[f"{name}-a", f"{name}-b"])
    w.commit(name, f"{name}-a")
    w.dispatch(name, f"intent-{name}", "idempotent", key=f"key-{name}")
    w.observe(name, f"intent-{name}", "succeeded")
    result = run(w)
    assert_clean(result)
    t = turn(result, name)
    assert (t.decision, t.resume_from, t.lineage) == (Decision.RESUME, f"{name}-b", f"lineage-{name}")
    out = to_json(result)
    assert name.encode() in out  # UTF-8 in the output, not \u escapes
    doc = json.loads(out)
    assert doc["run"] == f"run-{name}"
    assert doc["turns"][0]["turn"] == name
    assert doc["turns"][0]["intents"][0]["intent"] == f"intent-{name}"


def test_turn_ids_are_compared_exactly_not_normalised() -> None:
    # "é" precomposed and decomposed are different turns: identifiers are bytes, never guessed equal.
    w = writer()
    w.plan("\u00e9")
    w.plan("e\u0301")
    w.commit("e\u0301", "plan")
    result = run(w)
    assert_clean(result)
    assert [(t.turn, t.resume_from) for t in result.turns] == [("\u00e9", "plan"), ("e\u0301", "envelope")]


def test_each_turn_gets_its_own_intents_whatever_order_turns_dispatch_in() -> None:
    # Decisions are read in order of first planning; intents in order of first dispatch. Here a turn
    # dispatches before one planned earlier, and two turns dispatch in turns.
    w = writer()
    for name in ("t1", "t2", "t3"):
        w.plan(name, "job-1")
    w.dispatch("t2", "a", "safe")
    w.dispatch("t1", "b", "safe")
    w.dispatch("t2", "c", "safe")
    w.dispatch("t1", "d", "safe")
    w.dispatch("t3", "e", "safe")
    result = run(w)
    assert_clean(result)
    assert [t.turn for t in result.turns] == ["t1", "t2", "t3"]
    assert [[i.intent for i in t.intents] for t in result.turns] == [["b", "d"], ["a", "c"], ["e"]]


def test_a_turn_first_planned_on_a_discarded_suffix_and_again_on_the_live_branch_decides_from_the_live_one() -> None:
    w = writer()
    w.plan("t1", "job-1")
    point = w.mark()
    w.plan("t2", "job-1")  # the fork's point: on the live timeline
    w.plan("t3", "job-1")
    w.plan("t4", "job-1")
    w.fork(point)
    w.plan("t3", "job-1")
    w.commit("t3", "plan")
    w.plan("t5", "job-1")
    result = run(w)
    decided = [(t.turn, t.decision, t.branch, t.completed_phases) for t in result.turns]
    assert decided == [
        ("t1", Decision.RESUME, 0, ()),
        ("t2", Decision.RESUME, 0, ()),
        ("t3", Decision.RESUME, 1, ("plan",)),
        ("t4", Decision.DISCARDED, 0, ()),
        ("t5", Decision.RESUME, 1, ()),
    ]
