"""The door check (engine/door.py) against the engine: for a journal broken in one place, the first fault the
door sees is the engine's first run-level violation, whether the journal arrives in one batch or in two
(the second checked against the heads the first left). A sound journal passes the door with no fault."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import assess
from engine.canonical import digest
from engine.door import DoorRecord, Head, door_faults
from tests.journal_builder import JournalBuilder

DOOR_CODES = {"lsn_gap", "chain_broken", "fork_invalid", "record_invalid", "kind_unknown", "schema_unsupported"}


@st.composite
def journals(draw: st.DrawFn) -> JournalBuilder:
    b = JournalBuilder()
    turns = 0
    for _ in range(draw(st.integers(min_value=1, max_value=12))):
        step = draw(st.sampled_from(["plan", "commit", "dispatch", "fork"]))
        if step == "plan" or turns == 0:
            turns += 1
            b.plan(f"t{turns}")
        elif step == "commit":
            b.commit(f"t{turns}", "plan")
        elif step == "dispatch":
            b.dispatch(f"t{turns}", f"i{len(b.lines)}", effect_class="safe")
        else:
            # A rewind point before the fork's own place on the live branch.
            b.fork(from_lsn=draw(st.integers(min_value=-1, max_value=b._next_lsn.get(b.live, 0) - 1)))
    return b


MUTATIONS = ["lsn_up", "lsn_down", "prev_wrong", "prev_drop", "float", "kind", "at", "v"]


def mutate(obj: dict[str, Any], how: str) -> dict[str, Any]:
    obj = dict(obj)
    if how == "lsn_up":
        obj["lsn"] += 1
    elif how == "lsn_down" and obj["lsn"] > 0:
        obj["lsn"] -= 1
    elif how == "prev_wrong":
        obj["prev"] = "0" * 64
    elif how == "prev_drop":
        obj.pop("prev", None)
    elif how == "float":
        obj["note"] = 1.5
    elif how == "kind":
        obj["kind"] = "turn_plan"
    elif how == "at":
        obj["at"] = "yesterday"
    elif how == "v":
        obj["v"] = 3
    return obj


def door_of(objs: list[dict[str, Any]], lines: list[bytes], heads: dict[int, Head], first_line: int = 1) -> list[Any]:
    records = [
        DoorRecord(first_line + i, obj, digest(obj), None, line)
        for i, (obj, line) in enumerate(zip(objs, lines, strict=True))
    ]
    return door_faults(records, heads)


def heads_after(objs: list[dict[str, Any]]) -> dict[int, Head]:
    """The store's heads after a sound prefix: each branch's last record, and a forked branch with none yet."""
    heads: dict[int, Head] = {0: Head(-1, None)}
    for obj in objs:
        heads[obj["branch"]] = Head(obj["lsn"], digest(obj))
        if obj["kind"] == "fork":
            heads[obj["new_branch"]] = Head(-1, digest(obj))
    return heads


@settings(max_examples=300, deadline=None)
@given(journals(), st.data())
def test_a_sound_journal_passes_the_door_whole_or_cut_in_two(builder, data):
    objs = [orjson.loads(line) for line in builder.lines]
    assert [v for v in assess(builder.lines).violations if v.code in DOOR_CODES] == []
    assert door_of(objs, builder.lines, {0: Head(-1, None)}) == []
    cut = data.draw(st.integers(min_value=0, max_value=len(objs)))
    assert door_of(objs[cut:], builder.lines[cut:], heads_after(objs[:cut]), cut + 1) == []


@settings(max_examples=400, deadline=None)
@given(journals(), st.data())
def test_the_first_fault_at_the_door_is_the_engines_first_run_level_violation(builder, data):
    objs = [orjson.loads(line) for line in builder.lines]
    at = data.draw(st.integers(min_value=0, max_value=len(objs) - 1))
    how = data.draw(st.sampled_from(MUTATIONS))
    broken = mutate(objs[at], how)
    objs[at] = broken
    lines = [orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) for obj in objs]
    engine = [v for v in assess(lines).violations if v.code in DOOR_CODES]
    cut = data.draw(st.integers(min_value=0, max_value=at))
    faults = door_of(objs[cut:], lines[cut:], heads_after(objs[:cut]), cut + 1)
    if not engine:
        assert faults == []
        return
    assert faults, (engine, lines, faults)
    first = engine[0]
    at_first_line = {(v.code, v.branch, v.lsn) for v in engine if v.line == first.line}
    assert faults[0].line == first.line, (engine, lines, faults)
    assert (faults[0].code, faults[0].branch, faults[0].lsn) in at_first_line, (engine, lines, faults)


def test_a_wrong_prev_names_the_digest_it_should_have_been():
    b = JournalBuilder()
    first = b.plan("t1")
    second = b.commit("t1", "plan")[0]
    wrong = {**second, "prev": "f" * 64}
    faults = door_faults([DoorRecord(1, wrong, digest(wrong))], {0: Head(0, digest(first))})
    assert [(f.code, f.expected_lsn, f.expected_prev) for f in faults] == [("chain_broken", 1, digest(first))]


def test_a_branch_no_fork_created_is_fork_invalid():
    b = JournalBuilder()
    b.plan("t1")
    obj = {**orjson.loads(b.lines[0]), "branch": 3}
    faults = door_faults([DoorRecord(1, obj, digest(obj))], {0: Head(-1, None)})
    assert [f.code for f in faults] == ["fork_invalid"]


def test_a_read_error_is_record_invalid_before_anything_else():
    b = JournalBuilder()
    obj = b.plan("t1")
    faults = door_faults([DoorRecord(1, obj, digest(obj), invalid="a duplicate key")], {0: Head(-1, None)})
    assert [(f.code, f.detail) for f in faults] == [("record_invalid", "line 1: a duplicate key")]
