"""Layer: status and recovery (docs/contract.md sections 2 "retries", 3, 4, 5 and 6): what each turn may
do next, the precedence table, intents and their resolutions, forks, checkpoints and operator evidence."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Decision, Evidence, digest, fold_state, rebuild_state
from tests.engine.helpers import (
    PHASES,
    assert_clean,
    assert_run_blocked,
    codes,
    commit_through,
    full_turn,
    on_branch,
    put,
    run,
    turn,
    writer,
)

# -- every decision -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_complete(status: str) -> None:
    w = writer()
    w.plan("t1")
    if status == "completed":
        commit_through(w, "t1", "spend")
    else:
        w.commit("t1", "plan")  # failed and cancelled turns may stop anywhere
    w.terminal("t1", status)
    result = run(w)
    assert_clean(result)
    t = turn(result, "t1")
    assert (t.decision, t.resume_from, t.reason, t.terminal) == (Decision.COMPLETE, None, None, status)


def test_finalize() -> None:
    w = writer()
    w.plan("t1")
    commit_through(w, "t1", "spend")
    t = turn(run(w), "t1")
    assert (t.decision, t.resume_from, t.reason) == (Decision.FINALIZE, None, None)


def test_resume_runs_only_the_missing_phases() -> None:
    w = writer()
    w.plan("t1")
    commit_through(w, "t1", "execute")
    t = turn(run(w), "t1")
    assert (t.decision, t.resume_from, t.reason) == (Decision.RESUME, "readback", None)
    assert t.completed_phases == ("plan", "envelope", "dispatch", "execute")


def test_blocked_carries_a_reason_and_no_resume_from() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "envelope")
    t = turn(run(w), "t1")
    assert (t.decision, t.resume_from, t.reason) == (Decision.BLOCKED, None, "phase_prefix_violation")


def test_discarded() -> None:
    w = writer()
    w.plan("t0")
    point = w.mark()
    w.commit("t0", "plan")
    w.plan("t1", "job-1")
    w.commit("t1", "plan")
    w.fork(point)
    result = run(w)
    assert_clean(result)
    t = turn(result, "t1")
    assert (t.decision, t.resume_from, t.reason, t.branch, t.lineage) == (
        Decision.DISCARDED,
        None,
        None,
        0,
        "job-1",
    )
    assert t.completed_phases == ("plan",)  # as on the timeline it was planned on
    assert turn(result, "t0").completed_phases == ("plan",)


# -- the precedence table, row by row -------------------------------------------------------------------------


def _everything() -> Any:
    """A journal where every rule below rule 1 applies to some turn."""
    w = writer()
    w.plan("finalize")
    commit_through(w, "finalize", "spend")
    w.plan("complete")
    w.commit("complete", "plan")
    w.dispatch("complete", "pay", "unsafe")
    w.observe("complete", "pay", "succeeded")
    w.terminal("complete", "failed")
    w.plan("violating")
    w.commit("violating", "envelope")
    w.plan("indeterminate")
    w.dispatch("indeterminate", "pay", "unsafe")
    point = w.mark()
    w.plan("resume")
    w.plan("discarded")
    w.commit("discarded", "envelope")  # a violation on the discarded suffix
    w.dispatch("discarded", "pay", "unsafe")  # and an indeterminate effect
    w.fork(point)
    return w


def test_rows_2_to_7_each_apply() -> None:
    result = run(_everything())
    decided = {t.turn: (t.decision.value, t.reason, t.resume_from) for t in result.turns}
    assert decided == {
        "finalize": ("finalize", None, None),
        "complete": ("complete", None, None),
        "violating": ("blocked", "phase_prefix_violation", None),
        "indeterminate": ("blocked", "effect_indeterminate", None),
        "resume": ("resume", None, "plan"),
        "discarded": ("discarded", None, None),
    }


def test_row_1_a_run_level_violation_blocks_every_turn_discarded_ones_included() -> None:
    w = _everything()
    put(w, "phase_committed", envelope={"run": "other"}, turn="resume", phase="plan")
    result = run(w)
    assert_run_blocked(result, "run_mismatch")
    assert len(result.turns) == 6


def test_row_2_discarded_comes_before_turn_level_violations_and_indeterminate_effects() -> None:
    result = run(_everything())
    t = turn(result, "discarded")
    assert t.decision == Decision.DISCARDED
    [pay] = t.intents
    assert (pay.live, pay.resolution) == (False, "indeterminate")
    assert "phase_prefix_violation" in codes(result)  # reported, but it does not decide


def test_row_3_a_turn_level_violation_comes_before_an_indeterminate_effect() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.commit("t1", "dispatch")  # skipped plan and envelope
    t = turn(run(w), "t1")
    assert (t.decision, t.reason) == (Decision.BLOCKED, "phase_prefix_violation")


def test_row_3_the_earliest_turn_level_violation_is_the_reason() -> None:
    w = writer()
    w.plan("t1", "a")
    w.dispatch("t1", "put", "idempotent")  # idempotency_key_missing
    w.plan("t1", "b")  # lineage_conflict
    w.commit("t1", "envelope")  # phase_prefix_violation
    result = run(w)
    assert codes(result) == ["idempotency_key_missing", "lineage_conflict", "phase_prefix_violation"]
    assert turn(result, "t1").reason == "idempotency_key_missing"


def test_row_4_an_indeterminate_live_unsafe_intent_blocks_even_after_the_terminal_record() -> None:
    w = writer()
    w.plan("t1")
    commit_through(w, "t1", "dispatch")
    w.dispatch("t1", "pay", "unsafe")
    w.terminal("t1", "cancelled")
    result = run(w)
    assert_clean(result)
    t = turn(result, "t1")
    assert (t.decision, t.reason, t.terminal) == (Decision.BLOCKED, "effect_indeterminate", "cancelled")


def test_row_5_the_terminal_record_comes_before_finalize() -> None:
    w = writer()
    full_turn(w, "t1")
    assert turn(run(w), "t1").decision == Decision.COMPLETE


def test_row_6_every_phase_committed_is_finalize_even_with_unsettled_safe_intents() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "read", "safe")
    w.dispatch("t1", "put", "idempotent", key="k")
    commit_through(w, "t1", "spend")
    t = turn(run(w), "t1")
    assert t.decision == Decision.FINALIZE
    assert [(i.intent, i.resolution) for i in t.intents] == [("read", "replay"), ("put", "reissue")]


def test_row_7_resume() -> None:
    w = writer()
    w.plan("t1", phases=["a", "b"])
    assert turn(run(w), "t1").resume_from == "a"


# -- intent resolutions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "effect_class, key, outcome, resolution",
    [
        ("safe", None, None, "replay"),
        ("safe", None, "unknown", "replay"),
        ("safe", None, "succeeded", "settled"),
        ("safe", None, "failed", "settled"),
        ("idempotent", "k", None, "reissue"),
        ("idempotent", "k", "unknown", "reissue"),
        ("idempotent", "k", "succeeded", "settled"),
        ("idempotent", "k", "failed", "settled"),
        ("unsafe", None, None, "indeterminate"),
        ("unsafe", None, "unknown", "indeterminate"),
        ("unsafe", None, "succeeded", "settled"),
        ("unsafe", None, "failed", "settled"),
        ("unsafe", "k", None, "indeterminate"),
    ],
)
def test_resolution_by_class_and_readback(
    effect_class: str, key: str | None, outcome: str | None, resolution: str
) -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "i1", effect_class, key=key)
    if outcome is not None:
        w.observe("t1", "i1", outcome)
    result = run(w)
    assert_clean(result)
    [intent] = turn(result, "t1").intents
    assert (intent.intent, intent.effect_class, intent.branch, intent.live, intent.resolution) == (
        "i1",
        effect_class,
        0,
        True,
        resolution,
    )
    blocked = resolution == "indeterminate"
    assert (turn(result, "t1").reason == "effect_indeterminate") is blocked


def test_a_later_unknown_never_downgrades_a_definitive_readback() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "succeeded")
    w.observe("t1", "pay", "unknown")
    [intent] = turn(run(w), "t1").intents
    assert intent.resolution == "settled"


def test_conflicting_readbacks_are_not_settled() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "succeeded")
    w.observe("t1", "pay", "failed")
    result = run(w)
    [intent] = turn(result, "t1").intents
    assert (intent.resolution, intent.outcome) == ("indeterminate", "conflicting")
    assert turn(result, "t1").reason == "effect_indeterminate"


def test_a_readback_is_of_the_latest_dispatch_before_it() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "failed")
    w.dispatch("t1", "pay", "unsafe")  # legal: the first one failed
    result = run(w)
    assert_clean(result)
    [intent] = turn(result, "t1").intents
    assert (intent.dispatches, intent.resolution) == (2, "indeterminate")
    w.observe("t1", "pay", "succeeded")
    [intent] = turn(run(w), "t1").intents
    assert intent.resolution == "settled"


def test_intents_are_named_by_turn_and_id() -> None:
    w = writer()
    w.plan("t1")
    w.plan("t2")
    w.dispatch("t1", "pay", "unsafe")
    w.dispatch("t2", "pay", "unsafe")  # another turn's intent: not a retry
    w.observe("t2", "pay", "succeeded")
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").reason == "effect_indeterminate"
    assert turn(result, "t2").decision == Decision.RESUME


# -- retries ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effect_class, key", [("safe", None), ("idempotent", "k-1")])
@pytest.mark.parametrize("outcome", [None, "unknown", "succeeded", "failed"])
def test_safe_and_idempotent_retries_are_always_legal(effect_class: str, key: str | None, outcome: str | None) -> None:
    w = writer()
    w.plan("t1")
    for _ in range(3):
        w.dispatch("t1", "i1", effect_class, key=key)
        if outcome is not None:
            w.observe("t1", "i1", outcome)
    assert_clean(run(w))


def test_an_unsafe_retry_after_an_observed_failure_is_legal() -> None:
    w = writer()
    w.plan("t1")
    for _ in range(3):
        w.dispatch("t1", "pay", "unsafe")
        w.observe("t1", "pay", "failed")
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").intents[0].resolution == "settled"


@pytest.mark.parametrize("outcome", [None, "unknown", "succeeded"])
def test_any_other_unsafe_retry_is_unsafe_redispatch(outcome: str | None) -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    if outcome is not None:
        w.observe("t1", "pay", outcome)
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "succeeded")
    result = run(w)
    assert codes(result) == ["unsafe_redispatch"]
    v = result.violations[0]
    assert (v.branch, v.lsn, v.turn, v.line) == (0, 3 if outcome else 2, "t1", 4 if outcome else 3)
    t = turn(result, "t1")
    assert (t.decision, t.reason) == (Decision.BLOCKED, "unsafe_redispatch")


def test_an_unsafe_retry_after_conflicting_readbacks_is_unsafe_redispatch() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "failed")
    w.observe("t1", "pay", "succeeded")
    w.dispatch("t1", "pay", "unsafe")
    assert codes(run(w)) == ["unsafe_redispatch"]


def test_unsafe_redispatch_across_a_fork_dispatched_before_it_redispatched_after_it() -> None:
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "pay", "unsafe")  # on the suffix the fork discards: still a fact about the world
    w.fork(point)
    w.dispatch("t1", "pay", "unsafe")
    result = run(w)
    assert codes(result) == ["unsafe_redispatch"]
    assert (result.violations[0].branch, result.violations[0].lsn) == (1, 0)
    t = turn(result, "t1")
    assert (t.decision, t.reason) == (Decision.BLOCKED, "unsafe_redispatch")


def test_unsafe_redispatch_across_a_fork_from_the_kept_prefix() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    point = w.mark()
    w.commit("t1", "plan")
    w.fork(point)
    w.dispatch("t1", "pay", "unsafe")
    assert codes(run(w)) == ["unsafe_redispatch"]


def test_a_failure_observed_on_a_discarded_suffix_allows_the_retry_after_the_fork() -> None:
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "failed")  # a readback counts wherever it was recorded
    w.fork(point)
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "succeeded")
    result = run(w)
    assert_clean(result)
    [pay] = turn(result, "t1").intents
    assert (pay.branch, pay.live, pay.resolution, pay.dispatches) == (1, True, "settled", 2)


def test_a_readback_on_the_live_branch_settles_a_dispatch_made_before_the_fork() -> None:
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "pay", "unsafe")
    w.fork(point)
    w.observe("t1", "pay", "succeeded")
    result = run(w)
    assert_clean(result)
    [pay] = turn(result, "t1").intents
    assert (pay.branch, pay.live, pay.resolution) == (0, False, "settled")


# -- turn-level violations ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first, retry",
    [
        (("unsafe", None), ("safe", None)),
        (("safe", None), ("unsafe", None)),
        (("idempotent", "k-1"), ("idempotent", "k-2")),
        (("idempotent", "k-1"), ("safe", None)),
        (("unsafe", "k-1"), ("unsafe", None)),
    ],
    ids=["unsafe-to-safe", "safe-to-unsafe", "other-key", "drops-key", "unsafe-drops-key"],
)
def test_a_retry_that_changes_class_or_key_is_intent_conflict(
    first: tuple[str, str | None], retry: tuple[str, str | None]
) -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "i1", first[0], key=first[1])
    w.observe("t1", "i1", "failed")
    w.dispatch("t1", "i1", retry[0], key=retry[1])
    result = run(w)
    assert codes(result)[0] == "intent_conflict"
    assert turn(result, "t1").reason == "intent_conflict"


def test_a_readback_of_an_intent_never_dispatched_is_intent_unknown() -> None:
    w = writer()
    w.plan("t1")
    w.observe("t1", "ghost", "succeeded")
    result = run(w)
    assert codes(result) == ["intent_unknown"]
    assert turn(result, "t1").reason == "intent_unknown"


def test_a_readback_before_the_dispatch_is_intent_unknown() -> None:
    w = writer()
    w.plan("t1")
    w.observe("t1", "pay", "succeeded")
    w.dispatch("t1", "pay", "unsafe")
    result = run(w)
    assert codes(result) == ["intent_unknown"]
    assert turn(result, "t1").reason == "intent_unknown"


def test_a_readback_for_another_turns_intent_is_intent_unknown() -> None:
    w = writer()
    w.plan("t1")
    w.plan("t2")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t2", "pay", "succeeded")
    result = run(w)
    assert codes(result) == ["intent_unknown"]
    assert turn(result, "t2").reason == "intent_unknown"
    assert turn(result, "t1").reason == "effect_indeterminate"


@pytest.mark.parametrize("key", [None, ""], ids=["absent", "empty"])
def test_an_idempotent_intent_without_a_key_is_idempotency_key_missing(key: str | None) -> None:
    w = writer()
    w.plan("t1")
    full_turn(w, "t0")
    if key is None:
        put(w, "intent_dispatched", turn="t1", intent="put", effect_class="idempotent")
    else:
        put(w, "intent_dispatched", turn="t1", intent="put", effect_class="idempotent", idempotency_key=key)
    result = run(w)
    assert codes(result) == ["idempotency_key_missing"]
    assert turn(result, "t1").reason == "idempotency_key_missing"
    assert turn(result, "t0").decision == Decision.COMPLETE


def test_completed_with_phases_uncommitted_is_status_phase_mismatch() -> None:
    w = writer()
    w.plan("t1")
    commit_through(w, "t1", "writeback")
    w.terminal("t1", "completed")
    result = run(w)
    assert codes(result) == ["status_phase_mismatch"]
    assert turn(result, "t1").reason == "status_phase_mismatch"


@pytest.mark.parametrize("kind", ["phase", "dispatch", "observe", "terminal"])
def test_a_record_naming_the_turn_after_its_terminal_record_is_status_phase_mismatch(kind: str) -> None:
    w = writer()
    w.plan("t1", phases=["a", "b"])
    w.commit("t1", "a")
    w.dispatch("t1", "read", "safe")
    w.terminal("t1", "failed")
    if kind == "phase":
        w.commit("t1", "b")
    elif kind == "dispatch":
        w.dispatch("t1", "read", "safe")
    elif kind == "observe":
        w.observe("t1", "read", "succeeded")
    else:
        w.terminal("t1", "failed")
    result = run(w)
    assert codes(result) == ["status_phase_mismatch"]
    assert (turn(result, "t1").decision, turn(result, "t1").reason) == (Decision.BLOCKED, "status_phase_mismatch")


@pytest.mark.parametrize("kind", ["phase", "dispatch", "observe", "terminal"])
def test_a_record_for_a_turn_never_planned_is_unknown_turn_and_blocks_nothing_else(kind: str) -> None:
    w = writer()
    full_turn(w, "t0")
    if kind == "phase":
        w.commit("ghost", "plan")
    elif kind == "dispatch":
        w.dispatch("ghost", "pay", "safe")
    elif kind == "observe":
        w.observe("ghost", "pay", "succeeded")
    else:
        w.terminal("ghost", "failed")
    result = run(w)
    assert "unknown_turn" in codes(result)
    assert result.violations[0].turn == "ghost"
    assert [t.turn for t in result.turns] == ["t0"]  # a turn never planned gets no decision
    assert turn(result, "t0").decision == Decision.COMPLETE


@pytest.mark.parametrize("kind", ["phase", "dispatch", "terminal"])
def test_a_turn_named_before_it_was_planned_is_blocked_by_unknown_turn(kind: str) -> None:
    w = writer()
    if kind == "phase":
        w.commit("t1", "plan")
    elif kind == "dispatch":
        w.dispatch("t1", "read", "safe")
    else:
        w.terminal("t1", "cancelled")
    w.plan("t1")
    w.commit("t1", "plan")
    result = run(w)
    assert codes(result) == ["unknown_turn"]
    t = turn(result, "t1")
    assert (t.decision, t.reason) == (Decision.BLOCKED, "unknown_turn")


def test_lineage_conflict_blocks_the_turn() -> None:
    w = writer()
    w.plan("t1", "a")
    w.plan("t1", "b")
    assert turn(run(w), "t1").reason == "lineage_conflict"


@pytest.mark.parametrize(
    "commits, why",
    [
        (["envelope"], "skipped"),
        (["plan", "dispatch"], "skipped-middle"),
        (["plan", "envelope", "plan"], "twice-earlier"),
        (["plan", "plan"], "twice"),
        (["plan", "execute", "envelope"], "out-of-order"),
        (["plan", "deploy"], "not-in-plan"),
        (["spend"], "last-first"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_phase_prefix_violation(commits: list[str], why: str) -> None:
    w = writer()
    w.plan("t1")
    for phase in commits:
        w.commit("t1", phase)
    result = run(w)
    assert codes(result)[0] == "phase_prefix_violation"
    t = turn(result, "t1")
    assert (t.decision, t.reason) == (Decision.BLOCKED, "phase_prefix_violation")
    # The missing phase is never filled in by guessing: only the contiguous prefix counts.
    assert all(p == q for p, q in zip(t.completed_phases, PHASES, strict=False))


# -- forks --------------------------------------------------------------------------------------------------------


def _two_branches() -> Any:
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.commit("t1", "envelope")
    w.fork(point)  # branch 1 keeps branch 0 through lsn 1
    return w


def test_a_fork_makes_the_new_branch_live_and_progress_counts_only_there() -> None:
    w = _two_branches()
    w.commit("t1", "envelope")
    w.commit("t1", "dispatch")
    result = run(w)
    assert_clean(result)
    assert result.live_branch == 1
    t = turn(result, "t1")
    assert (t.completed_phases, t.resume_from, t.branch) == (("plan", "envelope", "dispatch"), "execute", 0)
    views = {b.branch: b for b in result.branches}
    assert (views[0].live, views[0].discarded_from, views[0].last_lsn) == (False, 1, 3)
    assert (views[1].live, views[1].parent, views[1].from_lsn, views[1].fork_lsn) == (True, 0, 1, 3)


def test_a_fork_with_no_records_yet_on_the_new_branch_is_legal() -> None:
    w = _two_branches()
    result = run(w)
    assert_clean(result)
    assert result.live_branch == 1
    assert turn(result, "t1").resume_from == "envelope"


def test_a_fork_from_lsn_minus_1_on_branch_0_discards_everything() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    w.fork(-1)
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").decision == Decision.DISCARDED
    w.plan("t1")
    t = turn(run(w), "t1")
    assert (t.decision, t.resume_from, t.branch) == (Decision.RESUME, "plan", 1)


def test_a_fork_from_lsn_minus_1_on_a_forked_branch_keeps_what_it_inherited() -> None:
    w = _two_branches()
    w.plan("t2")
    w.fork(-1)  # branch 2: branch 0 through lsn 1, none of branch 1's records
    result = run(w)
    assert_clean(result)
    assert result.live_branch == 2
    assert turn(result, "t1").resume_from == "envelope"
    assert turn(result, "t2").decision == Decision.DISCARDED


def test_nested_forks_inherit_recursively() -> None:
    w = writer()
    w.plan("a")
    w.commit("a", "plan")
    p0 = w.mark()
    w.plan("b")
    w.plan("gone-0")
    w.fork(p0)  # 1: branch 0 through its lsn 2 (plan b)
    w.commit("b", "plan")
    p1 = w.mark()
    w.commit("a", "envelope")
    w.plan("gone-1")
    w.fork(p1)  # 2: branch 1 through its lsn 1
    w.commit("b", "envelope")
    result = run(w)
    assert_clean(result)
    assert result.live_branch == 2
    decided = {t.turn: (t.decision.value, t.completed_phases) for t in result.turns}
    assert decided == {
        "a": ("resume", ("plan", "envelope")),
        "b": ("resume", ("plan", "envelope")),
        "gone-0": ("discarded", ()),
        "gone-1": ("discarded", ()),
    }


def test_fork_invalid_when_not_from_the_live_branch() -> None:
    w = _two_branches()
    on_branch(w, 0, "fork", new_branch=2, from_lsn=0, reason="stale")
    result = run(w)
    assert codes(result) == ["fork_invalid"]
    assert (result.violations[0].branch, result.violations[0].lsn) == (0, 4)
    assert_run_blocked(result, "fork_invalid")


@pytest.mark.parametrize("new_branch", [0, 2, 7])
def test_fork_invalid_when_new_branch_is_not_one_more_than_the_highest(new_branch: int) -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    put(w, "fork", new_branch=new_branch, from_lsn=0, reason="r")
    assert_run_blocked(run(w), "fork_invalid")


@pytest.mark.parametrize("from_lsn", [2, 3, 50, -2])
def test_fork_invalid_when_from_lsn_is_not_below_its_own_lsn(from_lsn: int) -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    put(w, "fork", new_branch=1, from_lsn=from_lsn, reason="r")  # the fork is lsn 2
    assert_run_blocked(run(w), "fork_invalid")


def test_fork_invalid_for_a_record_on_a_branch_no_fork_created() -> None:
    w = writer()
    w.plan("t1")
    on_branch_record = {
        "v": 2,
        "run": "run-1",
        "branch": 1,
        "lsn": 0,
        "kind": "turn_planned",
        "at": "2026-01-01T00:00:09Z",
        "turn": "t9",
        "lineage": "l",
    }
    w.write_raw(on_branch_record)
    result = run(w)
    assert codes(result) == ["fork_invalid"]
    assert_run_blocked(result, "fork_invalid")
    assert [t.turn for t in result.turns] == ["t1"]  # the record is otherwise ignored


def test_the_fork_record_digest_is_the_prev_of_the_new_branch() -> None:
    w = _two_branches()
    fork_record = [r for r in map(lambda line: __import__("orjson").loads(line), w.lines) if r["kind"] == "fork"][0]
    first = w.commit("t1", "envelope")
    assert first["prev"] == digest(fork_record)
    w2 = _two_branches()
    put(w2, "phase_committed", envelope={"prev": "f" * 64}, turn="t1", phase="envelope")
    assert_run_blocked(run(w2), "chain_broken")
    w3 = _two_branches()
    put(w3, "phase_committed", drop=("prev",), turn="t1", phase="envelope")
    assert_run_blocked(run(w3), "chain_broken")


def test_a_discarded_suffix_is_evidence_its_intents_are_live_false() -> None:
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "pay", "unsafe")  # no readback, on the suffix the fork discards
    w.dispatch("t1", "read", "safe")
    w.fork(point)  # keeps lsn 1 (plan committed)
    w.commit("t1", "envelope")
    result = run(w)
    assert_clean(result)
    t = turn(result, "t1")
    assert [(i.intent, i.branch, i.live, i.resolution) for i in t.intents] == [
        ("pay", 0, False, "indeterminate"),
        ("read", 0, False, "replay"),
    ]
    # Indeterminate, but not live: it does not block the live turn.
    assert (t.decision, t.resume_from) == (Decision.RESUME, "dispatch")


def test_an_intent_is_live_when_any_of_its_dispatches_is_on_the_live_timeline() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "read", "safe")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "read", "safe")
    w.fork(point)
    [read] = turn(run(w), "t1").intents
    assert (read.branch, read.live, read.dispatches) == (0, True, 2)


def test_a_stale_writer_appending_to_a_discarded_branch_is_evidence_not_a_live_violation() -> None:
    w = _two_branches()
    w.commit("t1", "envelope")
    on_branch(w, 0, "phase_committed", turn="t1", phase="dispatch")  # progress on the stale branch
    on_branch(w, 0, "phase_committed", turn="t1", phase="spend")  # a turn rule broken on the stale timeline
    on_branch(w, 0, "turn_planned", turn="stale-only", lineage="l")
    result = run(w)
    assert codes(result) == ["phase_prefix_violation"]
    assert result.violations[0].branch == 0
    t = turn(result, "t1")
    assert (t.decision, t.resume_from, t.completed_phases) == (Decision.RESUME, "dispatch", ("plan", "envelope"))
    assert turn(result, "stale-only").decision == Decision.DISCARDED


@pytest.mark.parametrize("breakage", ["lsn", "chain"])
def test_stale_records_are_checked_for_lsn_and_chain_like_any_other(breakage: str) -> None:
    w = _two_branches()
    w.commit("t1", "envelope")
    live = w.branch
    w.branch = 0
    if breakage == "lsn":
        put(w, "phase_committed", envelope={"lsn": 9}, turn="t1", phase="dispatch")
    else:
        put(w, "phase_committed", envelope={"prev": "0" * 64}, turn="t1", phase="dispatch")
    w.branch = live
    assert_run_blocked(run(w), "lsn_gap" if breakage == "lsn" else "chain_broken")


# -- checkpoints --------------------------------------------------------------------------------------------------


def test_a_valid_checkpoint_with_and_without_state() -> None:
    w = writer()
    full_turn(w, "t1")
    w.plan("t2")
    w.commit("t2", "plan")
    plain = w.checkpoint()
    w.commit("t2", "envelope")
    full = w.checkpoint(with_state=True)
    result = run(w)
    assert_clean(result)
    assert [c["verified"] for c in result.checkpoints] == [True, True]
    assert plain["state_digest"] == digest(fold_state(w.lines, 0, plain["covers_lsn"]))
    assert full["state"] == fold_state(w.lines, 0, full["covers_lsn"])


def test_the_fold_shape_has_its_own_exported_version() -> None:
    """PROJECTION_VERSION names the canonical fold's shape (docs/engine.md, "Versions"), apart from
    ENGINE_VERSION; the service stores both beside every assessment."""
    import engine as engine

    assert "PROJECTION_VERSION" in engine.__all__
    assert isinstance(engine.PROJECTION_VERSION, str)
    assert engine.PROJECTION_VERSION.strip() != ""
    assert engine.PROJECTION_VERSION.strip() == engine.PROJECTION_VERSION


def test_a_checkpoint_covering_minus_1_and_covering_an_earlier_lsn() -> None:
    w = writer()
    w.plan("t1")
    put(w, "checkpoint", covers_lsn=-1, state_digest=digest({"schema": 0, "turns": [], "unplanned": []}))
    w.commit("t1", "plan")
    put(w, "checkpoint", covers_lsn=0, state_digest=digest(fold_state(w.lines, 0, 0)))
    result = run(w)
    assert_clean(result)
    assert [(c["covers_lsn"], c["verified"]) for c in result.checkpoints] == [(-1, True), (0, True)]


def test_a_checkpoint_whose_digest_does_not_match_is_checkpoint_mismatch() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    put(w, "checkpoint", covers_lsn=1, state_digest="0" * 64)
    result = run(w)
    assert codes(result) == ["checkpoint_mismatch"]
    assert_run_blocked(result, "checkpoint_mismatch")


def test_a_checkpoint_whose_state_does_not_match_its_digest_is_checkpoint_mismatch() -> None:
    w = writer()
    w.plan("t1")
    state = fold_state(w.lines, 0, 0)
    forged = dict(state, turns=[])
    put(w, "checkpoint", covers_lsn=0, state_digest=digest(state), state=forged)
    assert_run_blocked(run(w), "checkpoint_mismatch")


@pytest.mark.parametrize("covers", [2, 3, 100, -2], ids=["own-lsn", "after", "far", "below-minus-1"])
def test_a_checkpoint_covering_an_lsn_out_of_range_is_checkpoint_mismatch(covers: int) -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    put(w, "checkpoint", covers_lsn=covers, state_digest=digest(fold_state(w.lines, 0, 1)))  # lsn 2
    assert_run_blocked(run(w), "checkpoint_mismatch")


def test_a_checkpoint_carries_turn_level_violations_so_rebuilding_never_unblocks() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "envelope")  # phase_prefix_violation before the checkpoint
    cp = w.checkpoint(with_state=True)
    above_start = len(w.lines)
    w.commit("t1", "plan")
    assert [v["code"] for v in cp["state"]["turns"][0]["violations"]] == ["phase_prefix_violation"]
    rebuilt = rebuild_state(cp["state"], w.lines[above_start:])
    assert rebuilt == fold_state(w.lines, 0, len(w.lines) - 1)
    assert rebuilt["turns"][0]["violations"][0]["code"] == "phase_prefix_violation"
    assert turn(run(w), "t1").reason == "phase_prefix_violation"


def test_a_checkpoint_carries_unknown_turn_for_a_turn_planned_after_it() -> None:
    w = writer()
    w.commit("t1", "plan")  # unknown_turn: t1 is not planned yet
    cp = w.checkpoint(with_state=True)
    above_start = len(w.lines)
    w.plan("t1")
    w.commit("t1", "plan")
    rebuilt = rebuild_state(cp["state"], w.lines[above_start:])
    assert rebuilt == fold_state(w.lines, 0, len(w.lines) - 1)
    result = run(w)
    assert [c["verified"] for c in result.checkpoints] == [True]
    assert turn(result, "t1").reason == "unknown_turn"


def test_a_v1_era_checkpoint_then_v2_records() -> None:
    w = writer(version=1)
    w.plan("t1", phases=["a", "b", "c"])
    w.commit("t1", "a")
    w.dispatch("t1", "put", "idempotent", key="k")
    cp = w.checkpoint(with_state=True)
    above_start = len(w.lines)
    w.version = 2
    w.commit("t1", "b")
    w.observe("t1", "put", "succeeded")
    w.plan("t2")
    result = run(w)
    assert_clean(result)
    assert result.checkpoints[0]["verified"]
    assert cp["state"]["schema"] == 1
    assert cp["state"]["turns"][0]["phases"] == ["a", "b", "c"]  # v2-shaped: phases, not stages
    assert cp["state"]["turns"][0]["intents"][0]["effect_class"] == "idempotent"
    rebuilt = rebuild_state(cp["state"], w.lines[above_start:])
    assert rebuilt == fold_state(w.lines, 0, len(w.lines) - 1)
    assert rebuilt["schema"] == 2


def test_a_checkpoint_on_a_forked_branch() -> None:
    w = _two_branches()
    w.checkpoint()  # covers -1 of branch 1: the inherited prefix
    w.commit("t1", "envelope")
    w.checkpoint(with_state=True)
    result = run(w)
    assert_clean(result)
    assert [(c["branch"], c["covers_lsn"], c["verified"]) for c in result.checkpoints] == [(1, -1, True), (1, 1, True)]


def test_a_checkpoint_on_a_discarded_branch_is_verified_against_that_branch() -> None:
    w = _two_branches()
    w.plan("live-only")  # changes branch 1's timeline, not branch 0's
    on_branch(w, 0, "phase_committed", turn="t1", phase="dispatch")
    state = fold_state(w.lines, 0, 4)
    on_branch(w, 0, "checkpoint", covers_lsn=4, state_digest=digest(state))
    result = run(w)
    assert_clean(result)
    assert result.checkpoints[-1]["verified"]


def test_a_stale_checkpoint_covering_the_fork_point_after_the_new_branch_moved_on() -> None:
    # The fold at the fork point is needed twice: for the fork and for a checkpoint a stale writer adds
    # on the old branch later. The new branch's records must not leak into it.
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.commit("t1", "envelope")
    w.fork(point)
    w.plan("t2")
    w.commit("t1", "envelope")
    state = fold_state(w.lines, 0, point)
    on_branch(w, 0, "checkpoint", covers_lsn=point, state_digest=digest(state))
    result = run(w)
    assert_clean(result)
    assert result.checkpoints[-1]["verified"]


def test_two_forks_and_a_checkpoint_that_need_the_same_point() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    w.fork(-1)  # branch 1 holds nothing of branch 0
    w.plan("t2")
    w.checkpoint()  # covers branch 1's lsn 0
    w.fork(-1)  # branch 2: inherits nothing of branch 1 either
    w.plan("t3")
    result = run(w)
    assert_clean(result)
    decided = {t.turn: t.decision.value for t in result.turns}
    assert decided == {"t1": "discarded", "t2": "discarded", "t3": "resume"}


# -- operator evidence --------------------------------------------------------------------------------------------


def _indeterminate() -> Any:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    return w


@pytest.mark.parametrize("key", [("t1", "pay"), "pay"], ids=["turn-and-intent", "bare-intent"])
def test_evidence_happened_settles_and_not_happened_replays(key: Any) -> None:
    w = _indeterminate()
    happened = run(w, evidence={key: Evidence.HAPPENED})
    assert_clean(happened)
    assert turn(happened, "t1").intents[0].resolution == "settled"
    assert turn(happened, "t1").decision == Decision.RESUME
    not_happened = run(w, evidence={key: "not_happened"})
    assert turn(not_happened, "t1").intents[0].resolution == "replay"
    assert turn(not_happened, "t1").decision == Decision.RESUME


def test_bare_intent_evidence_applies_to_every_turns_intent_of_that_id() -> None:
    w = writer()
    w.plan("t1")
    w.plan("t2")
    w.dispatch("t1", "pay", "unsafe")
    w.dispatch("t2", "pay", "unsafe")
    result = run(w, evidence={"pay": Evidence.HAPPENED})
    assert [turn(result, t).intents[0].resolution for t in ("t1", "t2")] == ["settled", "settled"]
    only_t1 = run(w, evidence={("t1", "pay"): Evidence.HAPPENED})
    assert [turn(only_t1, t).intents[0].resolution for t in ("t1", "t2")] == ["settled", "indeterminate"]


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
@pytest.mark.parametrize("finding", ["happened", "not_happened"])
def test_evidence_never_overrides_an_observed_outcome(outcome: str, finding: str) -> None:
    w = _indeterminate()
    w.observe("t1", "pay", outcome)
    assert turn(run(w, evidence={"pay": finding}), "t1").intents[0].resolution == "settled"
    w.dispatch("t1", "pay", "unsafe")
    result = run(w, evidence={"pay": finding})
    # After an observed success a retry is a double effect whatever the operator says; after an observed
    # failure it is legal whatever the operator says.
    assert codes(result) == (["unsafe_redispatch"] if outcome == "succeeded" else [])


def test_not_happened_allows_one_retry_and_is_consumed_by_it() -> None:
    w = _indeterminate()
    w.dispatch("t1", "pay", "unsafe")
    assert codes(run(w)) == ["unsafe_redispatch"]
    result = run(w, evidence={"pay": Evidence.NOT_HAPPENED})
    assert_clean(result)
    # The retry is itself without readback: indeterminate again, the evidence was about the first dispatch.
    assert turn(result, "t1").intents[0].resolution == "indeterminate"
    assert turn(result, "t1").reason == "effect_indeterminate"
    w.dispatch("t1", "pay", "unsafe")
    assert codes(run(w, evidence={"pay": Evidence.NOT_HAPPENED})) == ["unsafe_redispatch"]


def test_happened_does_not_allow_a_retry() -> None:
    w = _indeterminate()
    w.dispatch("t1", "pay", "unsafe")
    assert codes(run(w, evidence={"pay": Evidence.HAPPENED})) == ["unsafe_redispatch"]


def test_not_happened_then_an_observed_failure_allows_the_next_retry() -> None:
    w = _indeterminate()
    w.dispatch("t1", "pay", "unsafe")  # allowed by the evidence
    w.observe("t1", "pay", "failed")
    w.dispatch("t1", "pay", "unsafe")  # allowed by the failure
    w.observe("t1", "pay", "succeeded")
    result = run(w, evidence={"pay": Evidence.NOT_HAPPENED})
    assert_clean(result)
    assert turn(result, "t1").intents[0].resolution == "settled"


def test_evidence_binds_to_the_first_dispatch_without_a_definitive_readback() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "failed")
    w.dispatch("t1", "pay", "unsafe")  # legal; no readback: the evidence is about this one
    w.dispatch("t1", "pay", "unsafe")  # allowed only by the evidence
    assert codes(run(w)) == ["unsafe_redispatch"]
    assert_clean(run(w, evidence={"pay": Evidence.NOT_HAPPENED}))


def test_evidence_for_an_intent_across_a_fork() -> None:
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "pay", "unsafe")
    w.fork(point)
    w.dispatch("t1", "pay", "unsafe")
    w.observe("t1", "pay", "succeeded")
    assert codes(run(w)) == ["unsafe_redispatch"]
    result = run(w, evidence={("t1", "pay"): Evidence.NOT_HAPPENED})
    assert_clean(result)
    assert turn(result, "t1").intents[0].resolution == "settled"


def test_evidence_for_an_intent_never_dispatched_changes_nothing() -> None:
    w = writer()
    full_turn(w, "t1")
    assert run(w, evidence={"nothing": Evidence.HAPPENED}).to_dict() == run(w).to_dict()


def test_an_unknown_evidence_value_is_refused() -> None:
    with pytest.raises(ValueError):
        run(_indeterminate(), evidence={"pay": "probably"})


# -- offset_mismatch --------------------------------------------------------------------------------------------


def test_the_expected_high_water_matches() -> None:
    w = _two_branches()
    w.commit("t1", "envelope")
    assert_clean(run(w, expect={0: 3, 1: 0}))
    assert_clean(run(w, expect={2: -1}))  # a branch with no records: -1


@pytest.mark.parametrize("expected", [2, 4, -1, 100])
def test_a_different_high_water_is_offset_mismatch(expected: int) -> None:
    w = writer()
    full_turn(w, "t1")  # lsn 0..8
    result = run(w, expect={0: expected})
    assert codes(result) == ["offset_mismatch"]
    v = result.violations[0]
    assert (v.branch, v.lsn, v.turn) == (0, 8, None)
    assert_run_blocked(result, "offset_mismatch")


def test_offset_mismatch_on_an_empty_branch_has_a_null_lsn() -> None:
    w = writer()
    w.plan("t1")
    result = run(w, expect={3: 5})
    assert [(v.code, v.branch, v.lsn) for v in result.violations] == [("offset_mismatch", 3, None)]


def test_offset_mismatch_comes_after_every_other_run_level_violation() -> None:
    w = writer()
    full_turn(w, "t1")
    put(w, "turn_planned", envelope={"run": "other"}, turn="t2", lineage="l")
    result = run(w, expect={0: 0})
    assert codes(result) == ["run_mismatch", "offset_mismatch"]
    assert_run_blocked(result, "run_mismatch")


def test_offset_mismatch_comes_after_a_turn_level_violation_in_the_list_but_still_blocks() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "envelope")
    result = run(w, expect={0: 7})
    assert codes(result) == ["phase_prefix_violation", "offset_mismatch"]
    assert_run_blocked(result, "offset_mismatch")


# -- run-level violations: the first in file order ------------------------------------------------------------


def test_run_level_violations_block_every_turn_with_the_first_one_in_file_order() -> None:
    w = writer()
    w.plan("t1")
    w.plan("t2")
    put(w, "phase_committed", envelope={"prev": "0" * 64}, turn="t1", phase="plan")  # line 3: chain_broken
    put(w, "mystery", turn="t1")  # line 4: kind_unknown
    put(w, "phase_committed", envelope={"run": "x"}, turn="t1", phase="envelope")  # line 5: run_mismatch
    result = run(w)
    assert codes(result) == ["chain_broken", "kind_unknown", "run_mismatch"]
    assert_run_blocked(result, "chain_broken")
    assert [t.reason_line for t in result.turns] == [3, 3]


def test_a_turn_level_violation_before_a_run_level_one_does_not_decide() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "envelope")  # turn-level, line 2
    put(w, "phase_committed", envelope={"lsn": 7}, turn="t1", phase="plan")  # run-level, line 3
    result = run(w)
    assert codes(result) == ["phase_prefix_violation", "lsn_gap"]
    assert_run_blocked(result, "lsn_gap")


def test_the_fold_of_the_empty_timeline_and_a_fork_as_the_very_first_record() -> None:
    assert fold_state([], 0, -1) == {"schema": 0, "turns": [], "unplanned": []}
    w = writer()
    w.fork(-1)  # legal: j = -1 < k = 0
    w.plan("t1")
    result = run(w)
    assert_clean(result)
    assert (result.live_branch, turn(result, "t1").branch) == (1, 1)
