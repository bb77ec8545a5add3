"""The generator of ``docs/contract-vectors.json``: the contract's test vectors (docs/contract.md).

Every byte in the file comes from the engine: each case's canonical bytes and digest from its reading of
the case's line (``engine.canonical.parse_line``), the chained journal from its reference writer, the
codes of the invalid cases from its assessment. ``tests/engine/test_contract_vectors.py`` holds the
committed file equal to what this module builds, so a change of the engine's bytes, or of the file, fails.

Regenerate after a deliberate change of the cases (never to make a failing test pass):

    .venv/bin/python -m tests.contract_vectors
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from engine import assess
from engine.canonical import parse_line
from engine.writer import JournalWriter, fixed_clock

PATH = Path(__file__).resolve().parent.parent / "docs" / "contract-vectors.json"
VERSION = 1
RUN = "vectors"
AT = "2026-01-01T00:00:00Z"


def _envelope(kind: str, **fields: Any) -> dict[str, Any]:
    return {"v": 2, "run": RUN, "branch": 0, "lsn": 0, "kind": kind, "at": AT, **fields}


def _line(record: dict[str, Any], *, spaced: bool = False, ascii_escaped: bool = False) -> str:
    """A record as a writer might send it: in insertion order, with or without spaces and \\u escapes.
    None of these is the canonical form; the reader's canonical bytes must not depend on them."""
    separators = (", ", ": ") if spaced else (",", ":")
    return json.dumps(record, separators=separators, ensure_ascii=ascii_escaped)


# (name, what it checks, the line as a writer sends it). Lines are JSON text: some cannot be produced by
# serialising a value (escapes spelled by hand, a key order no serialiser keeps).
_CASES: list[tuple[str, str, str]] = [
    (
        "turn_planned_default_phases",
        "a turn_planned record without phases (the default seven); keys already in order",
        '{"at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned","lineage":"job-1","lsn":0,"run":"vectors",'
        '"turn":"t1","v":2}',
    ),
    (
        "turn_planned_phases_unsorted_spaced",
        "a turn_planned record with a plan, keys out of order and spaces: sorted, spaces gone, list order kept",
        _line(_envelope("turn_planned", turn="t1", lineage="job-1", phases=["plan", "execute", "spend"]), spaced=True),
    ),
    (
        "turn_planned_v1_stages",
        "a v1 turn_planned record (stages, no prev)",
        _line({**_envelope("turn_planned", turn="t1", lineage="job-1", stages=["plan", "execute"]), "v": 1}),
    ),
    (
        "phase_committed",
        "a phase_committed record with prev",
        _line(_envelope("phase_committed", turn="t1", phase="plan", lsn=1, prev="0" * 64)),
    ),
    (
        "intent_dispatched_safe",
        "a safe intent",
        _line(_envelope("intent_dispatched", turn="t1", intent="lookup", effect_class="safe")),
    ),
    (
        "intent_dispatched_idempotent",
        "an idempotent intent with its key and args_digest",
        _line(
            _envelope(
                "intent_dispatched",
                turn="t1",
                intent="save-note",
                effect_class="idempotent",
                idempotency_key="vectors/t1/note",
                args_digest=hashlib.sha256(b"{}").hexdigest(),
            )
        ),
    ),
    (
        "intent_dispatched_unsafe",
        "an unsafe intent with extra fields of the writer's own",
        _line(
            _envelope(
                "intent_dispatched", turn="t1", intent="send-mail", effect_class="unsafe", note={"to": "ops", "n": 2}
            )
        ),
    ),
    (
        "intent_dispatched_v1_unsafe_flag",
        "a v1 intent: unsafe false with a key (read as idempotent)",
        _line(
            {
                **_envelope("intent_dispatched", turn="t1", intent="save-note", unsafe=False, idempotency_key="k-1"),
                "v": 1,
            }
        ),
    ),
    (
        "effect_observed",
        "a readback",
        _line(_envelope("effect_observed", turn="t1", intent="send-mail", outcome="unknown")),
    ),
    (
        "turn_terminal",
        "a terminal record",
        _line(_envelope("turn_terminal", turn="t1", status="completed")),
    ),
    (
        "fork",
        "a fork record; from_lsn -1 is a negative integer",
        _line(_envelope("fork", new_branch=1, from_lsn=-1, reason="operator rewind", lsn=3)),
    ),
    (
        "checkpoint_with_state",
        "a checkpoint carrying a state object: nested objects sorted at every depth",
        _line(
            _envelope(
                "checkpoint",
                lsn=5,
                covers_lsn=4,
                state_digest="f" * 64,
                state={"turns": [{"turn": "t1", "committed": ["plan"], "terminal": None}], "schema": 2},
            )
        ),
    ),
    (
        "keys_astral_vs_bmp",
        "keys sort by code point: U+FB01 before U+1F600 (UTF-16 code-unit order puts U+1F600 first)",
        '{"\\ud83d\\ude00":"grin","\\ufb01":"ligature","at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned",'
        '"lineage":"job-1","lsn":0,"run":"vectors","turn":"t1","v":2}',
    ),
    (
        "keys_sorted_before_escaping",
        'keys sort by their characters, not their escaped spelling: "\\n" (U+000A) before "A" before "a", '
        '"a" before "ab", "z" before "é"',
        '{"é":1,"z":2,"ab":3,"a":4,"A":5,"\\n":6,"at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned",'
        '"lineage":"job-1","lsn":0,"run":"vectors","turn":"t1","v":2}',
    ),
    (
        "escapes_quote_backslash_slash",
        'a quote and a backslash are escaped; "/" is not, even when the writer escaped it',
        '{"note":"say \\"hi\\" C:\\\\dir a\\/b","at":"2026-01-01T00:00:00Z","branch":0,"kind":"turn_planned",'
        '"lineage":"job-1","lsn":0,"run":"vectors","turn":"t1","v":2}',
    ),
    (
        "escapes_control_characters",
        "every character U+0000 to U+001F: \\b \\t \\n \\f \\r short, the others \\u00XX in lowercase hex "
        "(the writer spelled them in uppercase)",
        _line(_envelope("turn_planned", turn="t1", lineage="job-1", note="".join(chr(c) for c in range(0x20))))
        .replace("\\u001b", "\\u001B")
        .replace("\\u001f", "\\u001F"),
    ),
    (
        "raw_del_and_line_separators",
        "U+007F, U+2028 and U+2029 are written raw (the writer sent them escaped)",
        _line(
            _envelope("turn_planned", turn="t1", lineage="job-1", note="del\x7f ls\u2028 ps\u2029"), ascii_escaped=True
        ),
    ),
    (
        "non_ascii_values",
        "non-ASCII is written raw as UTF-8: Latin, CJK, an emoji (4 bytes), a combining mark kept as sent",
        _line(_envelope("turn_planned", turn="tür-1", lineage="工作-1", note="café 😀 e\u0301"), ascii_escaped=True),
    ),
    (
        "large_integers",
        "integers keep every digit: 2^53+1, 2^63-1, -2^63, 2^64 and a 40-digit one",
        _line(
            _envelope(
                "turn_planned",
                turn="t1",
                lineage="job-1",
                n={
                    "above_2_53": 2**53 + 1,
                    "i64_max": 2**63 - 1,
                    "i64_min": -(2**63),
                    "u64_over": 2**64,
                    "forty_digits": 10**39 + 7,
                },
            )
        ),
    ),
    (
        "integer_spellings",
        "-0 is the integer 0; booleans and null stay words; empty objects and lists stay empty",
        '{"zero":-0,"flags":[true,false,null],"empty":{"o":{},"l":[]},"at":"2026-01-01T00:00:00Z","branch":0,'
        '"kind":"turn_planned","lineage":"job-1","lsn":0,"run":"vectors","turn":"t1","v":2}',
    ),
    (
        "whitespace_around",
        "JSON whitespace around and inside the object is not part of the canonical bytes",
        ' \t{ "v" : 2 ,\t"run" : "vectors", "branch": 0, "lsn": 0, "kind": "turn_planned", "at": '
        '"2026-01-01T00:00:00Z", "turn": "t1", "lineage": "job-1" } \r',
    ),
    (
        "secret_field",
        "a secret field is part of the canonical bytes and the digest like any other (only projections redact)",
        _line(_envelope("intent_dispatched", turn="t1", intent="call", effect_class="safe", api_key="sk-123")),
    ),
]

# (name, what it checks, the line, the code an assessment of a journal of this line alone reports first).
_INVALID: list[tuple[str, str, bytes, str]] = [
    ("float", "a number with a fraction", b'{"v":2,"run":"vectors","n":1.5}', "record_invalid"),
    ("float_integral", "1.0 is a float, not the integer 1", b'{"v":2,"run":"vectors","n":1.0}', "record_invalid"),
    ("exponent", "a number with an exponent is a float", b'{"v":2,"run":"vectors","n":1e3}', "record_invalid"),
    ("negative_zero_float", "-0.0 is a float", b'{"v":2,"run":"vectors","n":-0.0}', "record_invalid"),
    (
        "duplicate_key",
        "a key twice in one object",
        b'{"v":2,"run":"vectors","turn":"t1","turn":"t2"}',
        "record_invalid",
    ),
    (
        "duplicate_key_nested",
        "a key twice in a nested object",
        b'{"v":2,"run":"vectors","note":{"a":1,"a":1}}',
        "record_invalid",
    ),
    (
        "lone_high_surrogate",
        "an escaped lone high surrogate",
        b'{"v":2,"run":"vectors","s":"\\ud800"}',
        "record_invalid",
    ),
    (
        "lone_low_surrogate",
        "an escaped lone low surrogate",
        b'{"v":2,"run":"vectors","s":"x\\udc00"}',
        "record_invalid",
    ),
    (
        "lone_surrogate_key",
        "a lone surrogate in a key",
        b'{"v":2,"run":"vectors","\\udbff":1}',
        "record_invalid",
    ),
    (
        "boolean_as_integer",
        "true where an integer is due (v): not an integer",
        b'{"v":true,"run":"vectors","branch":0,"lsn":0,"kind":"turn_planned","at":"2026-01-01T00:00:00Z"}',
        "record_invalid",
    ),
    ("nan", "NaN is not JSON: the line is not a JSON object", b'{"v":2,"run":"vectors","n":NaN}', "storage_corruption"),
    ("infinity", "Infinity is not JSON", b'{"v":2,"run":"vectors","n":-Infinity}', "storage_corruption"),
    (
        "surrogate_as_utf8",
        "a surrogate encoded as UTF-8 bytes (ED A0 80) is not UTF-8",
        b'{"v":2,"run":"vectors","s":"\xed\xa0\x80"}',
        "storage_corruption",
    ),
    (
        "byte_order_mark",
        "a UTF-8 byte order mark before the object",
        b'\xef\xbb\xbf{"v":2,"run":"vectors"}',
        "storage_corruption",
    ),
    ("not_an_object", "a JSON array is not a record", b'[{"v":2,"run":"vectors"}]', "storage_corruption"),
    ("torn", "a line cut short", b'{"v":2,"run":"vectors","kind":"turn_pla', "storage_corruption"),
    ("empty_line", "an empty line", b"", "storage_corruption"),
]


def _hex(data: bytes) -> str:
    return data.hex()


def canonical_case(name: str, about: str, line: str) -> dict[str, Any]:
    parsed = parse_line(line.encode())
    if parsed.error is not None or parsed.canonical is None:
        raise ValueError(f"case {name}: the engine reads it as {parsed.error}")
    return {
        "name": name,
        "about": about,
        "json": line,
        "canonical": parsed.canonical.decode(),
        "canonical_hex": _hex(parsed.canonical),
        "sha256": parsed.digest,
    }


def chained_journal() -> dict[str, Any]:
    """A small run written by the engine's reference writer: four records on branch 0, a fork to branch 1
    that discards two of them, and four records on branch 1 ending in a checkpoint."""
    writer = JournalWriter("vectors-chain", clock=fixed_clock())
    writer.plan("t1", "job-1", ["plan", "execute"])  # lsn 0
    writer.commit("t1", "plan")  # lsn 1
    writer.dispatch("t1", "save-note", "idempotent", "vectors-chain/t1/note")  # lsn 2
    writer.observe("t1", "save-note", "unknown")  # lsn 3
    writer.fork(1, "retry the note from a clean state")  # lsn 4 of branch 0; discards lsn 2 and 3
    writer.dispatch("t1", "save-note", "idempotent", "vectors-chain/t1/note")  # branch 1, lsn 0
    writer.observe("t1", "save-note", "succeeded")  # lsn 1
    writer.commit("t1", "execute")  # lsn 2
    writer.terminal("t1")  # lsn 3
    writer.checkpoint()  # lsn 4
    records = []
    for line in writer.lines:
        parsed = parse_line(line)
        assert parsed.obj is not None and parsed.canonical == line
        obj = parsed.obj
        records.append(
            {
                "branch": obj["branch"],
                "lsn": obj["lsn"],
                "kind": obj["kind"],
                "prev": obj.get("prev"),
                "line": line.decode(),
                "sha256": parsed.digest,
            }
        )
    result = assess(list(writer.lines)).to_dict()
    return {
        "about": "each record's prev is the sha256 of the previous record of its branch; branch 1's first "
        "record chains to the fork record (branch 0, lsn 4); the checkpoint's state_digest is the engine's fold "
        "(docs/engine.md)",
        "run": "vectors-chain",
        "records": records,
        "journal_sha256": hashlib.sha256(writer.data()).hexdigest(),
        "assessment": result,
    }


def invalid_case(name: str, about: str, line: bytes, code: str) -> dict[str, Any]:
    found = assess([line]).violations
    if not found or found[0].code != code:
        raise ValueError(f"invalid case {name}: the engine reports {[v.code for v in found]}, not {code}")
    case: dict[str, Any] = {"name": name, "about": about}
    with contextlib.suppress(UnicodeDecodeError):  # not UTF-8: the bytes alone say it
        case["json"] = line.decode()
    return {**case, "hex": _hex(line), "code": code}


def build() -> dict[str, Any]:
    return {
        "version": VERSION,
        "about": "Test vectors of the LoopX turn journal contract (docs/contract.md). 'json' is a line as a "
        "writer sends it; 'canonical' and 'canonical_hex' its canonical bytes (UTF-8); 'sha256' their digest. "
        "'invalid' lines must be refused with 'code'. Generated by tests/contract_vectors.py.",
        "cases": [canonical_case(*case) for case in _CASES],
        "chained_journal": chained_journal(),
        "invalid": [invalid_case(*case) for case in _INVALID],
    }


def render() -> bytes:
    """The file's exact bytes: ASCII only (every non-ASCII character \\u-escaped), two-space indent."""
    return (json.dumps(build(), indent=2, ensure_ascii=True) + "\n").encode("ascii")


def main() -> int:
    PATH.write_bytes(render())
    sys.stdout.write(f"wrote {PATH}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
