"""Layer: receipt (docs/contract.md section 1, 2 "v1 form", 5 "schema"): how a journal's bytes are read.

Every check here is run-level: it blocks every turn, with the first run-level violation in file order as
the reason (rule 1).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Code, Decision, assess, canonical_bytes, digest, parse_line
from engine.assess import _known_kind
from engine.canonical import parse_strict
from engine.types import KINDS
from tests.engine.helpers import (
    PHASES,
    assert_clean,
    assert_run_blocked,
    codes,
    contract_digest,
    full_turn,
    line_of,
    obj,
    put,
    run,
    turn,
    write_journal,
    writer,
)
from tests.engine.strategies import json_objects


def _base() -> Any:
    """A small valid journal: one complete turn and one in progress."""
    w = writer()
    full_turn(w, "t0")
    w.plan("t1")
    w.commit("t1", "plan")
    return w


# -- storage_corruption ----------------------------------------------------------------------------------

CORRUPT_LINES = {
    "torn": b'{"v":2,"run":"run-1","branch":0,"lsn":9,"kind":"phase_comm',
    "truncated-after-value": b'{"at":"2026-01-01T00:00:00Z","branch":0',
    "bad-utf8": b'{"at":"2026-01-01T00:00:00Z","branch":0,"kind":"x\xff\xfe"}',
    "overlong-utf8": b'{"a":"\xc0\xaf"}',
    "utf8-encoded-surrogate": b'{"a":"\xed\xa0\x80"}',
    "nan": b'{"v":2,"n":NaN}',
    "infinity": b'{"v":2,"n":Infinity}',
    "minus-infinity": b'{"v":2,"n":-Infinity}',
    "array": b"[1,2,3]",
    "number": b"42",
    "string": b'"a record"',
    "null": b"null",
    "two-objects": b'{"a":1}{"b":2}',
    "trailing-garbage": b'{"a":1} x',
    "empty": b"",
    "blank": b"   ",
    "single-quotes": b"{'v': 2}",
    "comment": b'{"v":2} // note',
}


@pytest.mark.parametrize("line", CORRUPT_LINES.values(), ids=CORRUPT_LINES.keys())
def test_a_line_that_is_not_one_complete_object_is_storage_corruption(line: bytes) -> None:
    w = _base()
    lines = [*w.lines[:3], line, *w.lines[3:]]
    result = run(lines)
    first = result.violations[0]
    assert (first.code, first.branch, first.lsn, first.turn, first.line) == ("storage_corruption", None, None, None, 4)
    assert_run_blocked(result, "storage_corruption")
    # The torn line is not a record; the ones after it still are.
    assert result.records == len(w.lines)


def test_parse_line_classifies_corruption_without_an_object() -> None:
    for line in CORRUPT_LINES.values():
        parsed = parse_line(line)
        assert (parsed.obj, parsed.canonical, parsed.error) == (None, None, "storage_corruption"), line


def test_a_torn_tail_blocks_the_run_and_is_not_dropped(tmp_path: Path) -> None:
    w = _base()
    torn = w.lines[-1][: len(w.lines[-1]) // 2]
    path = write_journal(tmp_path / "j.jsonl", [*w.lines[:-1], torn], final_newline=False)
    result = assess(path)
    assert result.records == len(w.lines) - 1
    assert codes(result) == ["storage_corruption"]
    assert_run_blocked(result, "storage_corruption")


def test_the_records_after_a_torn_line_may_show_further_violations_but_the_first_is_the_reason() -> None:
    w = _base()
    lines = list(w.lines)
    lines[4] = lines[4][:20]
    result = run(lines)
    assert codes(result)[0] == "storage_corruption"
    assert "lsn_gap" in codes(result) and "chain_broken" in codes(result)
    assert_run_blocked(result, "storage_corruption")


def test_one_final_newline_is_allowed_and_a_last_object_without_one_is_complete(tmp_path: Path) -> None:
    w = _base()
    with_nl = assess(write_journal(tmp_path / "a.jsonl", w.lines, final_newline=True))
    without = assess(write_journal(tmp_path / "b.jsonl", w.lines, final_newline=False))
    assert_clean(with_nl)
    assert with_nl.to_dict() == without.to_dict()
    assert with_nl.records == len(w.lines)


def test_two_final_newlines_are_an_empty_line(tmp_path: Path) -> None:
    w = _base()
    path = tmp_path / "j.jsonl"
    path.write_bytes(w.data() + b"\n")
    result = assess(path)
    assert codes(result) == ["storage_corruption"]
    assert result.violations[0].line == len(w.lines) + 1


def test_an_empty_line_in_the_middle_of_a_file(tmp_path: Path) -> None:
    w = _base()
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"\n".join([*w.lines[:2], b"", *w.lines[2:]]) + b"\n")
    result = assess(path)
    assert codes(result) == ["storage_corruption"]
    assert_run_blocked(result, "storage_corruption")


def test_an_empty_file_has_no_records_and_no_turns(tmp_path: Path) -> None:
    result = assess(write_journal(tmp_path / "j.jsonl", []))
    assert (result.run, result.records, result.violations, result.turns, result.live_branch) == (None, 0, (), (), 0)


# -- record_invalid: values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [1.5, 1.0, -0.0, 1e3, 2.5e-7, {"deep": [1, {"x": 0.5}]}, [0.1]],
    ids=["1.5", "1.0", "-0.0", "1e3", "exp", "nested", "in-list"],
)
def test_a_float_anywhere_is_record_invalid(extra: Any) -> None:
    w = _base()
    put(w, "phase_committed", turn="t1", phase="envelope", note=extra)
    result = run(w)
    assert codes(result) == ["record_invalid"]
    assert_run_blocked(result, "record_invalid")


@pytest.mark.parametrize("number", [b"1E5", b"1e+2", b"10.00", b"-1.5E-3", b"0.0"])
def test_float_spellings_in_raw_bytes_are_record_invalid(number: bytes) -> None:
    w = _base()
    record = put(w, "phase_committed", turn="t1", phase="envelope", note=123456789)
    lines = list(w.lines)
    lines[-1] = line_of(record).replace(b"123456789", number)
    assert codes(run(lines)) == ["record_invalid"]


def test_big_integers_are_integers_not_floats() -> None:
    w = _base()
    big = 2**80
    record = put(w, "phase_committed", turn="t1", phase="envelope", note=[big, -big])
    assert b"1208925819614629174706176" in w.lines[-1]
    result = run(w)
    assert_clean(result)
    assert parse_line(w.lines[-1]).digest == contract_digest(record)


@pytest.mark.parametrize(
    "line",
    [
        b'{"at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned","lsn":0,"run":"r","turn":"a","turn":"b","v":2}',
        b'{"at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned","lineage":"l","lsn":0,"run":"r",'
        b'"turn":"a","v":2,"x":{"k":1,"k":1}}',
        b'{"at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned","lineage":"l","lsn":0,"run":"r",'
        b'"turn":"a","v":2,"v":2}',
    ],
    ids=["top-level", "nested-identical", "same-value"],
)
def test_a_duplicate_key_is_record_invalid(line: bytes) -> None:
    result = run([line])
    assert codes(result) == ["record_invalid"]
    assert (result.violations[0].branch, result.violations[0].lsn) == (0, 0)  # the envelope is still known


@pytest.mark.parametrize("text", ["\\ud800", "\\udfff", "x\\udc00y", "\\ude00\\ud83d"])
def test_a_lone_surrogate_in_a_string_is_record_invalid(text: str) -> None:
    w = _base()
    record = put(w, "phase_committed", turn="t1", phase="envelope", note="PLACEHOLDER")
    lines = list(w.lines)
    lines[-1] = line_of(record).replace(b"PLACEHOLDER", text.encode())
    result = run(lines)
    assert codes(result) == ["record_invalid"]
    json.dumps(result.to_dict(), ensure_ascii=False).encode()  # the projection stays encodable


def test_a_lone_surrogate_in_a_key_or_in_the_turn_is_record_invalid_and_never_reaches_the_output() -> None:
    w = _base()
    record = put(w, "phase_committed", turn="TURN", phase="envelope", KEY=1)
    lines = list(w.lines)
    lines[-1] = line_of(record).replace(b'"KEY"', b'"\\ud800"').replace(b'"TURN"', b'"t\\udfff"')
    result = run(lines)
    assert codes(result) == ["record_invalid"]
    json.dumps(result.to_dict(), ensure_ascii=False).encode()


def test_a_valid_surrogate_pair_escape_is_fine() -> None:
    w = _base()
    record = put(w, "phase_committed", turn="t1", phase="envelope", note="PLACEHOLDER")
    lines = list(w.lines)
    lines[-1] = line_of(record).replace(b"PLACEHOLDER", b"\\ud83d\\ude00")
    assert_clean(run(lines))  # the chain digests the canonical (unescaped) form, so nothing breaks


def test_nesting_too_deep_for_the_parser_is_record_invalid_not_a_crash() -> None:
    w = _base()
    record = put(w, "phase_committed", turn="t1", phase="envelope", note="PLACEHOLDER")
    lines = list(w.lines)
    lines[-1] = line_of(record).replace(b'"PLACEHOLDER"', b"[" * 100_000 + b"]" * 100_000)
    result = run(lines)
    assert codes(result)[0] == "record_invalid"
    assert_run_blocked(result, "record_invalid")


# -- record_invalid: shape ---------------------------------------------------------------------------------

ENVELOPE_BREAKS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "v-missing": ({}, ("v",)),
    "v-string": ({"v": "2"}, ()),
    "v-bool": ({"v": True}, ()),
    "run-missing": ({}, ("run",)),
    "run-int": ({"run": 1}, ()),
    "branch-missing": ({}, ("branch",)),
    "branch-negative": ({"branch": -1}, ()),
    "branch-string": ({"branch": "0"}, ()),
    "lsn-missing": ({}, ("lsn",)),
    "lsn-negative": ({"lsn": -1}, ()),
    "lsn-bool": ({"lsn": False}, ()),
    "kind-missing": ({}, ("kind",)),
    "kind-int": ({"kind": 3}, ()),
    "kind-list": ({"kind": ["fork"]}, ()),
    "run-list": ({"run": ["run-1"]}, ()),
    "at-missing": ({}, ("at",)),
    "at-int": ({"at": 1767225600}, ()),
    "at-words": ({"at": "yesterday"}, ()),
    "at-date-only": ({"at": "2026-01-01"}, ()),
    "at-no-zone": ({"at": "2026-01-01T00:00:00"}, ()),
    "at-trailing-newline": ({"at": "2026-01-01T00:00:00Z\n"}, ()),
    "at-month-13": ({"at": "2026-13-01T00:00:00Z"}, ()),
    "at-hour-25": ({"at": "2026-01-01T25:00:00Z"}, ()),
    "at-arabic-digits": ({"at": "٢٠٢٦-01-01T00:00:00Z"}, ()),
}


@pytest.mark.parametrize("change", ENVELOPE_BREAKS.values(), ids=ENVELOPE_BREAKS.keys())
def test_a_broken_envelope_is_record_invalid(change: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    envelope, drop = change
    w = _base()
    put(w, "phase_committed", envelope=envelope, drop=drop, turn="t1", phase="envelope")
    result = run(w)
    assert codes(result) == ["record_invalid"]
    assert_run_blocked(result, "record_invalid")


@pytest.mark.parametrize(
    "at",
    ["2026-01-01T00:00:00Z", "2026-01-01t00:00:00z", "2026-01-01 00:00:00+05:30", "2026-01-01T23:59:60.123456-08:00"],
)
def test_rfc3339_times_are_accepted(at: str) -> None:
    w = _base()
    put(w, "phase_committed", envelope={"at": at}, turn="t1", phase="envelope")
    assert_clean(run(w))


def test_at_is_never_used_for_ordering() -> None:
    w = writer()
    w.plan("t1")
    put(w, "phase_committed", envelope={"at": "1999-01-01T00:00:00Z"}, turn="t1", phase="plan")
    put(w, "phase_committed", envelope={"at": "2099-01-01T00:00:00Z"}, turn="t1", phase="envelope")
    put(w, "phase_committed", envelope={"at": "1970-01-01T00:00:00Z"}, turn="t1", phase="dispatch")
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").resume_from == "execute"


KIND_BREAKS: dict[str, tuple[str, dict[str, Any]]] = {
    "planned-no-turn": ("turn_planned", {"lineage": "l"}),
    "phase-no-phase": ("phase_committed", {"turn": "t1"}),
    "phase-int": ("phase_committed", {"turn": "t1", "phase": 3}),
    "phase-empty": ("phase_committed", {"turn": "t1", "phase": ""}),
    "dispatch-no-intent": ("intent_dispatched", {"turn": "t1", "effect_class": "safe"}),
    "dispatch-int-intent": ("intent_dispatched", {"turn": "t1", "intent": 5, "effect_class": "safe"}),
    "dispatch-no-class": ("intent_dispatched", {"turn": "t1", "intent": "i"}),
    "dispatch-bad-class": ("intent_dispatched", {"turn": "t1", "intent": "i", "effect_class": "risky"}),
    "dispatch-int-key": (
        "intent_dispatched",
        {"turn": "t1", "intent": "i", "effect_class": "idempotent", "idempotency_key": 5},
    ),
    "dispatch-int-args-digest": (
        "intent_dispatched",
        {"turn": "t1", "intent": "i", "effect_class": "safe", "args_digest": 5},
    ),
    "observed-no-outcome": ("effect_observed", {"turn": "t1", "intent": "i"}),
    "observed-bad-outcome": ("effect_observed", {"turn": "t1", "intent": "i", "outcome": "maybe"}),
    "observed-no-intent": ("effect_observed", {"turn": "t1", "outcome": "failed"}),
    "terminal-no-status": ("turn_terminal", {"turn": "t1"}),
    "terminal-bad-status": ("turn_terminal", {"turn": "t1", "status": "done"}),
    "terminal-no-turn": ("turn_terminal", {"status": "failed"}),
    "fork-no-new-branch": ("fork", {"from_lsn": 0, "reason": "r"}),
    "fork-no-from-lsn": ("fork", {"new_branch": 1, "reason": "r"}),
    "fork-no-reason": ("fork", {"new_branch": 1, "from_lsn": 0}),
    "fork-string-from-lsn": ("fork", {"new_branch": 1, "from_lsn": "0", "reason": "r"}),
    "checkpoint-no-digest": ("checkpoint", {"covers_lsn": 0}),
    "checkpoint-no-covers": ("checkpoint", {"state_digest": "00"}),
    "checkpoint-int-digest": ("checkpoint", {"covers_lsn": 0, "state_digest": 0}),
    # Values that cannot even be compared with the allowed words (unhashable): invalid, never a crash.
    "terminal-list-status": ("turn_terminal", {"turn": "t1", "status": ["failed"]}),
    "observed-object-outcome": ("effect_observed", {"turn": "t1", "intent": "i", "outcome": {"failed": 1}}),
    "dispatch-list-class": ("intent_dispatched", {"turn": "t1", "intent": "i", "effect_class": ["safe"]}),
    "dispatch-object-key": (
        "intent_dispatched",
        {"turn": "t1", "intent": "i", "effect_class": "idempotent", "idempotency_key": {"k": 1}},
    ),
    "phase-list": ("phase_committed", {"turn": "t1", "phase": ["envelope"]}),
    "planned-list-turn": ("turn_planned", {"turn": ["t1"], "lineage": "l"}),
    "planned-object-lineage": ("turn_planned", {"turn": "t9", "lineage": {"a": 1}}),
}


@pytest.mark.parametrize("case", KIND_BREAKS.values(), ids=KIND_BREAKS.keys())
def test_a_field_its_kind_requires_missing_or_mistyped_is_record_invalid(case: tuple[str, dict[str, Any]]) -> None:
    kind, fields = case
    w = _base()
    put(w, kind, **fields)
    result = run(w)
    assert codes(result) == ["record_invalid"]
    assert_run_blocked(result, "record_invalid")


def test_other_fields_are_allowed_and_count_in_the_digest() -> None:
    w = _base()
    record = put(w, "phase_committed", turn="t1", phase="envelope", notes={"why": "ok", "n": [1, 2]})
    w.commit("t1", "dispatch")
    assert_clean(run(w))
    # Dropping the extra field changes the digest, so the next record's prev no longer matches.
    lines = list(w.lines)
    del record["notes"]
    lines[-2] = line_of(record)
    assert codes(run(lines)) == ["chain_broken"]


# -- run_mismatch, lsn_gap, chain_broken -----------------------------------------------------------------------


def test_another_run_id_is_run_mismatch() -> None:
    w = _base()
    put(w, "phase_committed", envelope={"run": "run-2"}, turn="t1", phase="envelope")
    result = run(w)
    assert codes(result) == ["run_mismatch"]
    assert result.run == "run-1"
    assert_run_blocked(result, "run_mismatch")


@pytest.mark.parametrize("lsn", [4, 6, 2, 0, 10**12], ids=["repeat-last", "skip", "back", "zero", "huge"])
def test_lsn_out_of_sequence_is_lsn_gap(lsn: int) -> None:
    w = writer()
    w.plan("t1")
    for phase in PHASES[:4]:
        w.commit("t1", phase)  # lsn 0..4
    put(w, "phase_committed", envelope={"lsn": lsn}, turn="t1", phase="readback")
    result = run(w)
    assert codes(result)[0] == "lsn_gap"
    assert result.violations[0].lsn == lsn
    assert_run_blocked(result, "lsn_gap")


def test_a_branch_starting_at_lsn_1_is_an_lsn_gap() -> None:
    w = writer()
    put(w, "turn_planned", envelope={"lsn": 1}, turn="t1", lineage="l")
    assert codes(run(w)) == ["lsn_gap"]


def test_one_gap_is_reported_once_not_as_a_cascade() -> None:
    w = writer()
    w.plan("t1")
    w.commit("t1", "plan")
    put(w, "phase_committed", envelope={"lsn": 3}, turn="t1", phase="envelope")  # lsn 2 is missing
    w.commit("t1", "dispatch")  # lsn 4: continues from the highest lsn seen
    w.commit("t1", "execute")
    result = run(w)
    assert codes(result) == ["lsn_gap"]
    assert (result.violations[0].lsn, result.violations[0].line) == (3, 3)


def test_a_wrong_prev_is_chain_broken() -> None:
    w = _base()
    put(w, "phase_committed", envelope={"prev": "0" * 64}, turn="t1", phase="envelope")
    result = run(w)
    assert codes(result) == ["chain_broken"]
    assert_run_blocked(result, "chain_broken")


def test_a_missing_prev_is_chain_broken() -> None:
    w = _base()
    put(w, "phase_committed", drop=("prev",), turn="t1", phase="envelope")
    assert codes(run(w)) == ["chain_broken"]


@pytest.mark.parametrize("prev", ["0" * 64, "", None], ids=["digest", "empty", "null"])
def test_prev_present_on_lsn_0_of_branch_0_is_chain_broken(prev: str | None) -> None:
    w = writer()
    put(w, "turn_planned", envelope={"prev": prev}, turn="t1", lineage="l")
    w.commit("t1", "plan")
    result = run(w)
    assert codes(result) == ["chain_broken"]
    assert (result.violations[0].branch, result.violations[0].lsn) == (0, 0)


def test_prev_is_the_digest_of_the_canonical_bytes() -> None:
    w = writer()
    first = w.plan("t1")
    second = w.commit("t1", "plan")
    expected = hashlib.sha256(
        json.dumps(first, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert second["prev"] == expected == digest(first) == parse_line(w.lines[0]).digest


def test_a_journal_written_in_another_json_formatting_is_read_by_its_canonical_digest() -> None:
    w = _base()
    w.dispatch("t1", "ü-intent", "safe", note="naïve ✓")
    reformatted = []
    for i, line in enumerate(w.lines):
        record = obj(line)
        if i % 3 == 0:
            reformatted.append(json.dumps(record, indent=None, ensure_ascii=True).encode())  # unsorted, escaped
        elif i % 3 == 1:
            reformatted.append(json.dumps(dict(reversed(record.items())), separators=(", ", ": ")).encode())
        else:
            reformatted.append(b"  " + line + b"  ")
    assert reformatted != w.lines
    assert run(reformatted).to_dict() == run(w).to_dict()


@pytest.mark.parametrize("where", [0, 63, 64, 100, -1])
@pytest.mark.parametrize("reformat", ["keys-reversed", "trailing-space", "duplicate-key"])
def test_one_line_out_of_canonical_form_among_many_is_found(tmp_path: Path, where: int, reformat: str) -> None:
    """Lines are proven canonical a batch at a time (one serialisation for all of them): a single line
    that is not, anywhere in a long journal, is still read by its canonical bytes (the chain holds, so
    the journal is clean) or, with a duplicate key, is record_invalid."""
    w = writer()
    for i in range(15):
        full_turn(w, f"t{i}")
    lines = list(w.lines)
    assert len(lines) > 130
    record = obj(lines[where])
    if reformat == "keys-reversed":
        lines[where] = orjson.dumps(dict(reversed(record.items())))
    elif reformat == "trailing-space":
        lines[where] = lines[where] + b" "
    else:
        lines[where] = lines[where][:-1] + b',"kind":' + orjson.dumps(record["kind"]) + b"}"
    assert lines[where] != w.lines[where]
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for result in (run(lines), assess(path)):
        if reformat == "duplicate-key":
            assert_run_blocked(result, "record_invalid")
            assert result.violations[0].line == (where % len(lines)) + 1
        else:
            assert result.to_dict() == run(w).to_dict()
            assert_clean(result)


def test_a_v1_record_prev_is_ignored() -> None:
    w = writer(version=1)
    w.plan("t1")
    put(w, "phase_committed", envelope={"prev": "not a digest"}, turn="t1", phase="plan")
    assert_clean(run(w))


def test_a_v2_record_after_v1_records_chains_to_the_v1_record() -> None:
    w = writer(version=1)
    w.plan("t1")
    w.commit("t1", "plan")
    w.version = 2
    upgraded = w.commit("t1", "envelope")
    assert upgraded["prev"] == digest(obj(w.lines[1]))
    assert_clean(run(w))
    put(w, "phase_committed", drop=("prev",), turn="t1", phase="dispatch")
    assert codes(run(w)) == ["chain_broken"]


# -- schema ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("v", [0, 3, -1, 99])
def test_another_schema_version_is_schema_unsupported(v: int) -> None:
    w = _base()
    put(w, "phase_committed", envelope={"v": v}, turn="t1", phase="envelope")
    result = run(w)
    assert codes(result) == ["schema_unsupported"]
    assert_run_blocked(result, "schema_unsupported")


def test_a_v1_record_after_a_v2_record_is_schema_regression() -> None:
    w = writer(version=1)
    w.plan("t1")
    w.version = 2
    w.commit("t1", "plan")
    w.version = 1
    w.commit("t1", "envelope")
    result = run(w)
    assert codes(result) == ["schema_regression"]
    assert_run_blocked(result, "schema_regression")


def test_versions_only_rise_along_a_timeline_so_a_fork_back_to_the_v1_era_may_write_v1() -> None:
    w = writer(version=1)
    point = w.mark()  # the next record (lsn 0) is the rewind point
    w.plan("t1")
    w.commit("t1", "plan")
    w.version = 2
    w.commit("t1", "envelope")
    w.fork(point)  # back to the v1-only prefix: t1 planned, nothing committed
    w.version = 1
    w.commit("t1", "plan")
    result = run(w)
    assert_clean(result)
    assert turn(result, "t1").resume_from == "envelope"


def test_the_schema_of_a_forked_timeline_is_inherited() -> None:
    w = writer(version=1)
    w.plan("t1")
    w.version = 2
    point = w.mark()
    w.commit("t1", "plan")
    w.fork(point)
    w.version = 1
    w.commit("t1", "envelope")
    assert codes(run(w)) == ["schema_regression"]


# -- kinds -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["turn_started", "Fork", "", "phase-committed"])
def test_an_unknown_kind_is_kind_unknown(kind: str) -> None:
    w = _base()
    put(w, kind, turn="t1")
    result = run(w)
    assert codes(result) == ["kind_unknown"]
    assert_run_blocked(result, "kind_unknown")


@given(st.sampled_from(sorted(KINDS)) | st.text(max_size=20))
def test_the_main_pass_knows_the_kinds_the_contract_names(kind: str) -> None:
    assert _known_kind(kind) == (kind in KINDS)


def test_a_kind_spelled_with_escapes_is_still_that_kind() -> None:
    # The pre-scan must find a fork even when its kind is written with \u escapes.
    w = writer()
    w.plan("t1")
    point = w.mark()
    w.commit("t1", "plan")
    w.commit("t1", "envelope")
    w.fork(point)
    w.commit("t1", "envelope")
    lines = list(w.lines)
    fork_index = next(i for i, line in enumerate(lines) if b'"kind":"fork"' in line)
    lines[fork_index] = lines[fork_index].replace(b'"kind":"fork"', b'"kind":"\\u0066ork"')
    assert parse_line(lines[fork_index]).digest == parse_line(w.lines[fork_index]).digest
    result = run(lines)
    assert_clean(result)
    assert result.live_branch == 1
    assert turn(result, "t1").resume_from == "dispatch"


# -- v1 upcasting -----------------------------------------------------------------------------------------------


def test_v1_stages_are_the_plan() -> None:
    w = writer(version=1)
    w.plan("t1", phases=["a", "b"])
    assert b'"stages":["a","b"]' in w.lines[0]
    w.commit("t1", "a")
    result = run(w)
    assert_clean(result)
    assert (turn(result, "t1").phases, turn(result, "t1").resume_from) == (("a", "b"), "b")


@pytest.mark.parametrize("stages", [[], ["a", "a"], "a"])
def test_v1_malformed_stages_are_record_invalid(stages: object) -> None:
    w = writer(version=1)
    put(w, "turn_planned", turn="t1", lineage="l", stages=stages)
    assert codes(run(w)) == ["record_invalid"]


@pytest.mark.parametrize(
    "fields, effect_class, resolution",
    [
        ({"unsafe": True}, "unsafe", "indeterminate"),
        ({"unsafe": True, "idempotency_key": "k"}, "unsafe", "indeterminate"),
        ({"unsafe": False, "idempotency_key": "k"}, "idempotent", "reissue"),
        ({"unsafe": False}, "safe", "replay"),
    ],
    ids=["unsafe-true", "unsafe-true-with-key", "false-with-key", "false-without-key"],
)
def test_v1_unsafe_is_upcast_to_an_effect_class(fields: dict[str, Any], effect_class: str, resolution: str) -> None:
    w = writer(version=1)
    w.plan("t1")
    put(w, "intent_dispatched", turn="t1", intent="i1", **fields)
    result = run(w)
    assert_clean(result)
    [intent] = turn(result, "t1").intents
    assert (intent.effect_class, intent.resolution) == (effect_class, resolution)


@pytest.mark.parametrize("unsafe", [None, 1, "true"], ids=["absent", "int", "string"])
def test_v1_dispatch_without_a_boolean_unsafe_is_record_invalid(unsafe: object) -> None:
    w = writer(version=1)
    w.plan("t1")
    if unsafe is None:
        put(w, "intent_dispatched", turn="t1", intent="i1")
    else:
        put(w, "intent_dispatched", turn="t1", intent="i1", unsafe=unsafe)
    assert codes(run(w)) == ["record_invalid"]


def test_a_v1_journal_and_the_same_journal_in_v2_decide_the_same() -> None:
    def build(version: int) -> list[bytes]:
        w = writer(version=version)
        w.plan("t1", "l", phases=["a", "b", "c"])
        w.commit("t1", "a")
        w.dispatch("t1", "pay", "unsafe")
        w.observe("t1", "pay", "failed")
        w.dispatch("t1", "pay", "unsafe")
        w.dispatch("t1", "read", "safe")
        w.dispatch("t1", "put", "idempotent", key="k-1")
        w.observe("t1", "put", "succeeded")
        w.plan("t2", "l")
        return w.lines

    v1, v2 = run(build(1)), run(build(2))
    assert_clean(v1)
    assert v1.to_dict() == v2.to_dict()
    assert turn(v1, "t1").reason == "effect_indeterminate"


# -- canonical bytes and the two parsing paths --------------------------------------------------------------


def test_canonical_bytes_are_exactly_the_contract_formula() -> None:
    record = {"b": [1, {"z": None, "a": True}], "a": "é\u2028\x00\x7f😀", "\u00e9": -5, "e": {}}
    expected = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert canonical_bytes(record) == expected
    assert digest(record) == hashlib.sha256(expected).hexdigest()
    parsed = parse_line(expected)
    assert (parsed.obj, parsed.canonical, parsed.error, parsed.digest) == (
        record,
        expected,
        None,
        hashlib.sha256(expected).hexdigest(),
    )


def _agree(line: bytes) -> None:
    fast, strict = parse_line(line), parse_strict(line)
    assert (fast.obj, fast.canonical, fast.error, fast.digest) == (
        strict.obj,
        strict.canonical,
        strict.error,
        strict.digest,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_objects())
def test_fast_and_strict_paths_agree_on_canonical_lines(record: dict[str, Any]) -> None:
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    _agree(line)
    parsed = parse_line(line)
    assert parsed.error is None
    assert parsed.canonical == line
    assert parsed.digest == contract_digest(record)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_objects(), st.sampled_from(["ascii", "spaces", "unsorted"]))
def test_fast_and_strict_paths_agree_on_other_formattings(record: dict[str, Any], style: str) -> None:
    if style == "ascii":
        line = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    elif style == "spaces":
        line = json.dumps(record, sort_keys=True, ensure_ascii=False).encode()
    else:
        line = json.dumps(dict(reversed(list(record.items()))), separators=(",", ":"), ensure_ascii=False).encode()
    _agree(line)
    assert parse_line(line).canonical == canonical_bytes(record)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_objects(), st.floats(allow_nan=False, allow_infinity=False), st.data())
def test_fast_and_strict_paths_agree_that_a_float_is_record_invalid(
    record: dict[str, Any], number: float, data: st.DataObject
) -> None:
    # Put the float at a random depth.
    target: Any = record
    for _ in range(data.draw(st.integers(0, 3))):
        children = [v for v in target.values() if isinstance(v, dict)]
        if not children:
            break
        target = data.draw(st.sampled_from(children))
    target["\u00f8float"] = number
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    _agree(line)
    assert parse_line(line).error == "record_invalid"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_objects(min_size=1), st.data())
def test_fast_and_strict_paths_agree_that_a_duplicate_key_is_record_invalid(
    record: dict[str, Any], data: st.DataObject
) -> None:
    key = data.draw(st.sampled_from(sorted(record)))
    body = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    line = (body[:-1] + "," + json.dumps(key, ensure_ascii=False) + ":" + json.dumps(record[key]) + "}").encode()
    _agree(line)
    assert parse_line(line).error == "record_invalid"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_objects(), st.integers(min_value=0))
def test_fast_and_strict_paths_agree_on_every_truncation(record: dict[str, Any], cut: int) -> None:
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    torn = line[: cut % len(line)]
    _agree(torn)
    assert parse_line(torn).error == "storage_corruption"


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_orjson_spells_every_float_with_a_dot_or_a_signed_exponent(number: float) -> None:
    # The fast path skips the float walk for a line without ".", "+" and "e-", and for a block without ".",
    # "+" and "e-" followed by a digit: this is why that is sound.
    spelled = orjson.dumps({"a": number})
    assert b"." in spelled or b"e+" in spelled or re.search(rb"e-[0-9]", spelled) is not None


def test_the_decision_of_a_valid_journal_is_not_blocked_by_reading() -> None:
    w = _base()
    result = run(w)
    assert_clean(result)
    assert [(t.turn, t.decision) for t in result.turns] == [("t0", Decision.COMPLETE), ("t1", Decision.RESUME)]
    assert Code.RECORD_INVALID.run_level and not Code.UNKNOWN_TURN.run_level


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.lists(st.dictionaries(st.text(max_size=4), _json_values, max_size=4), min_size=1, max_size=6),
    st.data(),
)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_the_batch_proof_of_canonical_bytes_agrees_with_checking_each_line(objs: list[Any], data: Any) -> None:
    """``proven_canonical`` (ingest's streamed path proves a whole batch once, after parsing it in chunks)
    says True exactly when every line is its value's canonical bytes, as the per-line check says."""
    from engine import proven_canonical

    lines = [canonical_bytes(o) for o in objs]
    if data.draw(st.booleans()):  # spoil one line: foreign formatting, same value
        at = data.draw(st.integers(0, len(lines) - 1))
        lines[at] = json.dumps(
            objs[at], ensure_ascii=data.draw(st.booleans()), indent=data.draw(st.sampled_from([None, 1]))
        ).encode()
    parsed = [orjson.loads(line) for line in lines]
    per_line = all(orjson.dumps(p, option=orjson.OPT_SORT_KEYS) == line for p, line in zip(parsed, lines, strict=True))
    assert proven_canonical(parsed, lines) is per_line
