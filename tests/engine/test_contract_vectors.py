"""The engine against the contract's shipped test vectors (docs/contract-vectors.json, docs/contract.md).

The vectors are what another implementation checks itself against, so the engine must give exactly them:
every case's canonical bytes and digest, the chained journal's `prev` chain and its clean assessment, the
code of every invalid line. The committed file must also be exactly what tests/contract_vectors.py builds
from the engine today: a changed byte on either side fails here.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import assess, canonical_bytes, digest, parse_line
from tests import contract_vectors
from tests.engine.helpers import assert_changed_only, fold_in_batches

ROOT = Path(__file__).resolve().parents[2]
VECTORS: dict[str, Any] = json.loads(contract_vectors.PATH.read_text(encoding="ascii"))
CASES = VECTORS["cases"]
INVALID = VECTORS["invalid"]
CHAIN = VECTORS["chained_journal"]


def test_the_committed_file_is_what_the_engine_builds_today():
    assert contract_vectors.PATH.read_bytes() == contract_vectors.render()


def test_the_file_is_ascii_and_names_its_version():
    contract_vectors.PATH.read_bytes().decode("ascii")
    assert VECTORS["version"] == 1
    assert len(CASES) >= 20 and len(INVALID) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_canonical_bytes_and_digest(case):
    expected = bytes.fromhex(case["canonical_hex"])
    assert expected.decode("utf-8") == case["canonical"]
    assert hashlib.sha256(expected).hexdigest() == case["sha256"]
    # Through the engine's reading of the writer's line (the fast path for canonical lines, else the strict one).
    parsed = parse_line(case["json"].encode("utf-8"))
    assert parsed.error is None
    assert parsed.canonical == expected
    assert parsed.digest == case["sha256"]
    # Through the formula on the value itself.
    assert canonical_bytes(parsed.obj) == expected
    assert digest(parsed.obj) == case["sha256"]
    # Canonical bytes are a fixed point: reading them gives them back.
    assert parse_line(expected).canonical == expected


def _case(name: str) -> dict[str, Any]:
    return next(c for c in CASES if c["name"] == name)


def test_the_cases_pin_what_the_contract_text_says():
    """The rules docs/contract.md states, checked on the vectors' bytes themselves."""
    astral = _case("keys_astral_vs_bmp")["canonical"]
    assert astral.index("\ufb01") < astral.index("\U0001f600")  # code point order, not UTF-16's
    assert sorted(["\ufb01", "\U0001f600"], key=lambda k: k.encode("utf-16-be")) == ["\U0001f600", "\ufb01"]
    assert _case("keys_sorted_before_escaping")["canonical"].startswith('{"\\n":6,"A":5,"a":4,"ab":3,')
    assert '"note":"say \\"hi\\" C:\\\\dir a/b"' in _case("escapes_quote_backslash_slash")["canonical"]
    controls = _case("escapes_control_characters")["canonical"]
    assert (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f'
        "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d"
        '\\u001e\\u001f"'
    ) in controls
    assert "7f" in _case("raw_del_and_line_separators")["canonical_hex"]
    assert "e280a8" in _case("raw_del_and_line_separators")["canonical_hex"]  # U+2028 raw, as UTF-8
    assert "e280a9" in _case("raw_del_and_line_separators")["canonical_hex"]
    assert "f09f9880" in _case("non_ascii_values")["canonical_hex"]  # the emoji raw, four bytes
    big = _case("large_integers")["canonical"]
    for n in (2**53 + 1, 2**63 - 1, -(2**63), 2**64, 10**39 + 7):
        assert f":{n}" in big
    assert '"zero":0' in _case("integer_spellings")["canonical"]


@pytest.mark.parametrize("case", INVALID, ids=[c["name"] for c in INVALID])
def test_invalid_lines_get_their_code(case):
    line = bytes.fromhex(case["hex"])
    if "json" in case:
        assert case["json"].encode("utf-8") == line
    result = assess([line])
    assert result.violations, case["name"]
    assert result.violations[0].code == case["code"]
    # The line's own bytes decide for every case but one: `true` as `v` is a well-formed value that the
    # envelope's rule refuses.
    if case["name"] != "boolean_as_integer":
        assert parse_line(line).error == case["code"]
    # A refused line never blocks silently: every turn of a journal holding it is blocked by it.
    good = json.loads(_case("turn_planned_default_phases")["json"])
    journal = [canonical_bytes(good), line]
    turns = assess(journal).turns
    assert [t.decision.value for t in turns] == ["blocked"]
    assert turns[0].reason == case["code"]


def test_the_chained_journal_chains():
    records = CHAIN["records"]
    lines = [r["line"].encode("utf-8") for r in records]
    last: dict[int, str | None] = {0: None}
    for record, line in zip(records, lines, strict=True):
        parsed = parse_line(line)
        assert parsed.error is None and parsed.canonical == line  # written canonical: digest = sha256(line)
        assert hashlib.sha256(line).hexdigest() == record["sha256"] == parsed.digest
        obj = parsed.obj
        assert obj is not None
        assert (obj["branch"], obj["lsn"], obj["kind"], obj.get("prev")) == (
            record["branch"],
            record["lsn"],
            record["kind"],
            record["prev"],
        )
        assert obj.get("prev") == last[obj["branch"]]
        last[obj["branch"]] = record["sha256"]
        if obj["kind"] == "fork":
            last[obj["new_branch"]] = record["sha256"]  # lsn 0 of the new branch chains to its fork
    assert [(r["branch"], r["lsn"]) for r in records] == [(0, n) for n in range(5)] + [(1, n) for n in range(5)]
    data = b"".join(line + b"\n" for line in lines)
    assert hashlib.sha256(data).hexdigest() == CHAIN["journal_sha256"]
    result = assess(lines)
    assert result.violations == ()
    assert result.to_dict() == CHAIN["assessment"]
    assert [t.decision.value for t in result.turns] == ["complete"]


def test_the_chained_journal_through_the_stable_command(tmp_path):
    path = tmp_path / "chain.jsonl"
    path.write_bytes(b"".join(r["line"].encode("utf-8") + b"\n" for r in CHAIN["records"]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "assess_journal", str(path), "--json"],
        capture_output=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["violations"] == []
    assert out == CHAIN["assessment"]


def test_a_changed_byte_breaks_the_chain():
    """What a writer's check of its own chain must catch: one byte changed in an early record."""
    lines = [r["line"].encode("utf-8") for r in CHAIN["records"]]
    assert b'"at":"2026-01-01T00:00:01Z"' in lines[1]
    lines[1] = lines[1].replace(b":01Z", b":02Z")
    result = assess(lines)
    assert [(v.code, v.branch, v.lsn) for v in result.violations] == [("chain_broken", 0, 2)]
    assert [(t.decision.value, t.reason) for t in result.turns] == [("blocked", "chain_broken")]


def test_the_worked_example_of_docs_contract_md_is_right():
    """The two records and the digests printed in docs/contract.md ("Worked example") are what the engine
    computes, and the journal they make has no violation."""
    text = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    section = text[text.index("#### Worked example") :]
    blocks = section.split("```")
    lines = [line.encode("utf-8") for line in blocks[1].strip("\n").split("\n")]
    printed = [row.split()[0] for row in blocks[3].splitlines() if row and not row.startswith("$")]
    assert len(lines) == 2 and len(printed) == 2
    for line, shown in zip(lines, printed, strict=True):
        parsed = parse_line(line)
        assert parsed.error is None and parsed.canonical == line
        assert hashlib.sha256(line).hexdigest() == shown
    assert json.loads(lines[1])["prev"] == printed[0]
    result = assess(lines)
    assert result.violations == ()
    assert [(t.decision.value, t.resume_from) for t in result.turns] == [("resume", "envelope")]


def _incremental_everywhere(lines: list[bytes]) -> None:
    """The journal assessed incrementally gives what the full fold gives: resumed from a snapshot cut at every
    line (read back from its bytes), and fed line by line, each prefix equal to its own full fold. The chained
    journal forks back behind some cuts: those batches are refused and folded from the start. With
    changed_only, every batch lists every decision that differs from the full fold before it."""
    for cut in range(len(lines) + 1):
        assert set(fold_in_batches(lines, [cut], round_trip=True)[0]) <= {"fork_into_past"}
        assert_changed_only(lines, [cut])
    assert set(fold_in_batches(lines, range(len(lines)), round_trip=False)[0]) <= {"fork_into_past"}


def test_every_vector_assessed_incrementally_gives_the_same_result():
    _incremental_everywhere([r["line"].encode("utf-8") for r in CHAIN["records"]])
    good = canonical_bytes(json.loads(_case("turn_planned_default_phases")["json"]))
    for case in INVALID:
        _incremental_everywhere([good, bytes.fromhex(case["hex"]), good])
    for case in CASES:
        _incremental_everywhere([case["json"].encode("utf-8"), good])
