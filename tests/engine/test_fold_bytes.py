"""A turn's canonical bytes as the digest of a checkpoint writes them (engine/fold.py, canonical_many), put
together from pieces, against the contract's formula over the same turn."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.canonical import canonical_bytes
from engine.fold import TurnState, View, canonical_many
from engine.types import Code

names = st.text(max_size=12)  # any text: quotes, backslashes, control characters, other scripts
words = st.sampled_from(["succeeded", "failed", "unknown", "conflicting"])
counts = st.integers(0, 3) | st.integers(0, 2**70)  # beyond 64 bits, orjson refuses: the formula writes it


@st.composite
def turn_states(draw: st.DrawFn) -> tuple[str, TurnState]:
    phases = tuple(draw(st.lists(names, min_size=1, max_size=4, unique=True)))
    state = TurnState(draw(st.none() | names), phases, 0, 1)
    state.done = draw(st.integers(0, len(phases)))
    state.terminal = draw(st.none() | st.sampled_from(["completed", "failed", "cancelled"]))
    intents = draw(
        st.dictionaries(
            names,
            st.tuples(st.sampled_from(["safe", "idempotent", "unsafe"]), st.none() | names, counts, st.none() | words),
            max_size=3,
        )
    )
    state.intents = intents or None
    violations = draw(
        st.lists(st.tuples(st.sampled_from([Code.LINEAGE_MISSING, Code.UNKNOWN_TURN]), counts, counts, st.just(0)))
    )
    state.violations = tuple(violations)
    return draw(names), state


def formula(states: list[TurnState], turns: list[str]) -> list[bytes]:
    return [canonical_bytes(state.to_canonical(turn)) for state, turn in zip(states, turns, strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.lists(turn_states(), max_size=6))
def test_each_turn_is_written_as_the_formula_writes_it(items: list[tuple[str, TurnState]]) -> None:
    turns = [turn for turn, _ in items]
    states = [state for _, state in items]
    assert canonical_many(states, turns) == formula(states, turns)


def test_turns_that_share_a_plan_and_names_are_each_written_in_full() -> None:
    view = View()
    plan = ("plan", "act")
    for i in range(3):
        state = TurnState("job" if i < 2 else None, plan, 0, view.gen)
        state.done = i % 3
        state.intents = {"call": ("idempotent", f"key-{i}", i + 1, "succeeded" if i else None)}
        view.turns[f"t{i}"] = state
    states, turns = list(view.turns.values()), list(view.turns)
    assert canonical_many(states, turns) == formula(states, turns)
