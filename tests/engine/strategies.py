"""Hypothesis strategies for journals, shared by the engine tests and the layers above (store, API, chaos).

- `json_objects()`: arbitrary JSON objects as the contract allows them (integers of any size, no floats,
  any Unicode without lone surrogates).
- `valid_journals()`: randomly generated *valid* journals (see `tests/engine/journal_model.py`).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

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
