"""Hypothesis strategies for journals, shared by the engine tests and the layers above (store, API, chaos).

- `json_objects()`: arbitrary JSON objects as the contract allows them (integers of any size, no floats,
  any Unicode without lone surrogates).
- `valid_journals()`: randomly generated *valid* journals (see `tests/engine/journal_model.py`).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.engine.model import JournalModel

# Control characters, quotes, backslashes, the line separators and astral characters are all in play;
# lone surrogates are excluded (the contract makes them record_invalid; tests put them in on purpose).
json_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
json_keys = st.one_of(
    st.sampled_from(["v", "run", "branch", "lsn", "kind", "at", "prev", "turn", "phases", "api_key", "é", "", "\x00"]),
    json_text,
)
json_ints = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(),  # beyond 64 bits: still integers, they only leave the fast path
)
json_scalars = st.one_of(st.none(), st.booleans(), json_ints, json_text)


def json_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(json_keys, children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


def json_objects(min_size: int = 0, max_size: int = 6) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(json_keys, json_values(), min_size=min_size, max_size=max_size)


# -- valid journals ----------------------------------------------------------------------------------------

ids = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=5)
phase_plans = st.one_of(st.none(), st.lists(ids, min_size=1, max_size=5, unique=True))

_ACTIONS = (
    ["plan"] * 3
    + ["commit"] * 6
    + ["dispatch"] * 3
    + ["retry"] * 2
    + ["observe"] * 3
    + ["terminal"] * 2
    + [
        "evidence",
        "fail-and-retry",
        "replan",
        "mark",
        "mark",
        "fork",
        "checkpoint",
        "checkpoint-back",
        "upgrade",
        "stale",
    ]
)


@st.composite
def valid_journals(
    draw: st.DrawFn,
    *,
    max_steps: int = 40,
    versions: tuple[int, ...] = (1, 2),
    forks: bool = True,
    stale: bool = True,
    evidence: bool = True,
    upgrades: bool = True,
) -> JournalModel:
    """A journal that breaks no rule of the contract, written step by step by `JournalModel`: random turns
    and plans (Unicode identifiers), phases, intents of every class with readbacks, legal retries (unsafe
    ones after an observed failure or operator evidence), terminal records, forks from points marked in
    advance (or -1), stale writers on discarded branches, checkpoints, and v1 -> v2 upgrades (versions only
    rise). `model.expected()` is the assessment it must get; `model.evidence` the evidence to pass."""
    model = JournalModel(run=draw(ids), version=draw(st.sampled_from(versions)))
    model.plan(model.fresh(draw(ids)), draw(ids), draw(phase_plans))
    for _ in range(draw(st.integers(0, max_steps))):
        action = draw(st.sampled_from(_ACTIONS))
        open_turns = model.open_turns()
        if action == "plan":
            model.plan(model.fresh(draw(ids)), draw(ids), draw(phase_plans))
        elif action == "replan" and open_turns:
            model.plan(draw(st.sampled_from(open_turns)), "", None)
        elif action == "commit":
            ready = [
                t
                for t in open_turns
                if model.timelines[model.live].turns[t].done < len(model.timelines[model.live].turns[t].phases)
            ]
            if ready:
                model.commit_next(draw(st.sampled_from(ready)))
        elif action == "dispatch" and open_turns:
            model.dispatch_new(
                draw(st.sampled_from(open_turns)),
                model.fresh(draw(ids)),
                draw(st.sampled_from(["safe", "idempotent", "unsafe"])),
            )
        elif action == "retry":
            candidates = [key for key in model.world if model.can_retry(*key)]
            if candidates:
                model.retry(*draw(st.sampled_from(candidates)))
        elif action == "observe":
            candidates = [key for key in model.world if key[0] in open_turns]
            if candidates:
                key = draw(st.sampled_from(candidates))
                model.observe(*key, draw(st.sampled_from(["succeeded", "failed", "unknown"])))
        elif action == "terminal" and open_turns:
            name = draw(st.sampled_from(open_turns))
            state = model.timelines[model.live].turns[name]
            statuses = ["failed", "cancelled"] + (["completed"] * 3 if state.done == len(state.phases) else [])
            model.terminal(name, draw(st.sampled_from(statuses)))
        elif action == "evidence" and evidence:
            candidates = [key for key in model.world if model.can_give_evidence(*key)]
            if candidates:
                key = draw(st.sampled_from(candidates))
                model.give_evidence(*key, draw(st.sampled_from(["not_happened", "not_happened", "happened"])))
                if model.can_retry(*key) and draw(st.booleans()):
                    model.retry(*key)  # the one new dispatch the evidence allows
        elif action == "fail-and-retry":
            # An unsafe intent observed failed may be dispatched again (the other legal unsafe retry).
            candidates = [
                k
                for k, m in model.world.items()
                if k[0] in open_turns and m.effect_class == "unsafe" and m.dispatches[-1].outcome in (None, "unknown")
            ]
            if candidates:
                key = draw(st.sampled_from(candidates))
                model.observe(*key, "failed")
                model.retry(*key)
        elif action == "mark" and forks:
            model.mark()
        elif action == "fork" and forks:
            model.fork(draw(st.sampled_from(model.rewind_points())))
        elif action == "checkpoint":
            model.checkpoint(draw(st.booleans()))
        elif action == "checkpoint-back" and forks:
            model.checkpoint_back(draw(st.sampled_from(model.rewind_points())))
        elif action == "upgrade" and upgrades and model.w.version == 1:
            model.upgrade()
        elif action == "stale" and stale and model.stale_branches():
            branch = draw(st.sampled_from(model.stale_branches()))
            ready = [
                t
                for t in model.open_turns(branch)
                if model.timelines[branch].turns[t].done < len(model.timelines[branch].turns[t].phases)
            ]
            if ready and draw(st.booleans()):
                model.commit_next(draw(st.sampled_from(ready)), branch)
            else:
                model.plan(model.fresh(draw(ids)), draw(ids), None, branch)
    return model
