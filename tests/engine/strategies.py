"""Hypothesis strategies for journals, shared by the engine tests and the layers above (store, API, chaos).

- `json_objects()`: arbitrary JSON objects as the contract allows them (integers of any size, no floats,
  any Unicode without lone surrogates).
- `valid_journals()`: randomly generated *valid* journals (see `tests/engine/journal_model.py`).
- `damaged_lines()`: a journal's lines with a few drawn edits that break the contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
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
# What the store's door takes as a turn or intent id: no NUL, which no text column holds (journals/intake.py).
stored_ids = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=5)


def plans_of(names: st.SearchStrategy[str]) -> st.SearchStrategy[list[str] | None]:
    """A turn's phases: none (the contract's default plan) or a few distinct names."""
    return st.one_of(st.none(), st.lists(names, min_size=1, max_size=5, unique=True))


ACTIONS = (
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
# Forks back a few records and the same phases committed again, most of all: what moves a turn's committing
# records from one branch to another while its decision stays the same (a store's projection must follow).
FORK_HEAVY = (
    ["plan"] * 2
    + ["commit"] * 6
    + ["mark"] * 4
    + ["redo"] * 3
    + ["fork", "checkpoint-back", "dispatch", "observe", "terminal", "stale", "checkpoint"]
)


def mixed_journals(**kwargs: Any) -> st.SearchStrategy[JournalModel]:
    """``valid_journals(**kwargs)`` of every kind, and of mostly forks back (``FORK_HEAVY``)."""
    return st.one_of(valid_journals(**kwargs), valid_journals(actions=FORK_HEAVY, **kwargs))


def _commit_next(model: JournalModel, turn: str, phases: int) -> None:
    """Commit the turn's next phases on the live branch, ``phases`` at most (fewer when its plan ends)."""
    for _ in range(phases):
        state = model.timelines[model.live].turns[turn]
        if state.done < len(state.phases):
            model.commit_next(turn)


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
    run: str | None = None,
    names: st.SearchStrategy[str] = ids,
    actions: Sequence[str] = ACTIONS,
) -> JournalModel:
    """A journal that breaks no rule of the contract, written step by step by `JournalModel`: random turns
    and plans (Unicode identifiers), phases, intents of every class with readbacks, legal retries (unsafe
    ones after an observed failure or operator evidence), terminal records, forks from points marked in
    advance (or -1), stale writers on discarded branches, checkpoints, and v1 -> v2 upgrades (versions only
    rise). `model.expected()` is the assessment it must get; `model.evidence` the evidence to pass. ``run``:
    the run's id (drawn when None); ``names``: the ids of turns, lineages, phases and intents (a store's
    test draws them from ``stored_ids``, what its door takes); ``actions``: the steps drawn, each as often as
    it is listed (``FORK_HEAVY``: mostly forks back and the same phases committed again)."""
    plans = plans_of(names)
    model = JournalModel(run=draw(names) if run is None else run, version=draw(st.sampled_from(versions)))
    model.plan(model.fresh(draw(names)), draw(names), draw(plans))
    for _ in range(draw(st.integers(0, max_steps))):
        action = draw(st.sampled_from(actions))
        open_turns = model.open_turns()
        if action == "plan":
            model.plan(model.fresh(draw(names)), draw(names), draw(plans))
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
                model.fresh(draw(names)),
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
        elif action == "redo" and forks:
            # A new turn commits a few phases, then a fork back to its planning record and the same phases
            # committed again: a runtime that lost its last records and did the same work again. The turn's
            # decision comes out as before the fork; its committing records are the new branch's.
            turn = model.fresh(draw(names))
            model.mark()
            model.plan(turn, draw(names), draw(plans))
            planned = model.rewind_points()[-1]
            done = draw(st.integers(1, 3))
            _commit_next(model, turn, done)
            model.fork(planned)
            _commit_next(model, turn, done)
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
                model.plan(model.fresh(draw(names)), draw(names), None, branch)
    return model


def damaged_lines(lines: list[bytes], data: st.DataObject) -> list[bytes]:
    """The journal with a few lines repeated, dropped, swapped, torn or replaced by other JSON: lsn gaps and
    repeats (a branch's view that is no longer its fold through its head), chain breaks, corrupt lines, records
    the general path classifies."""
    out = list(lines)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        if not out:
            break
        at = data.draw(st.integers(0, len(out) - 1), label="at")
        edit = data.draw(st.sampled_from(["repeat", "drop", "swap", "tear", "empty", "other"]), label="edit")
        if edit == "repeat":
            out.insert(data.draw(st.integers(at, len(out)), label="to"), out[at])
        elif edit == "drop":
            del out[at]
        elif edit == "swap" and at + 1 < len(out):
            out[at], out[at + 1] = out[at + 1], out[at]
        elif edit == "tear":
            out[at] = out[at][: len(out[at]) // 2]
        elif edit == "empty":
            out.insert(at, b"")
        elif out[at].startswith(b"{") and out[at].endswith(b"}"):  # not a line torn before
            record = orjson.loads(out[at])
            record[data.draw(st.sampled_from(["lsn", "v", "kind", "turn", "phase", "branch"]), label="key")] = (
                data.draw(st.one_of(st.integers(-2, 3), st.text(max_size=3), st.none()), label="value")
            )
            out[at] = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    return out
