"""The Python client against the contract's shipped test vectors (docs/contract-vectors.json).

The client is another implementation of docs/contract.md: it must give every case's canonical bytes and
digest, refuse every invalid line, and, writing the chained journal's records, produce the same lines and
the same `prev` chain byte for byte. It reads the vectors only (no engine import): the file is the
reference both sides are held to.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from loopx_client import Journal, canonical

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "contract-vectors.json").read_text(encoding="ascii")
)
CASES = VECTORS["cases"]
INVALID = VECTORS["invalid"]
CHAIN = VECTORS["chained_journal"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_canonical_bytes_and_digest(case):
    expected = bytes.fromhex(case["canonical_hex"])
    assert expected.decode("utf-8") == case["canonical"]
    record = canonical.parse_record(case["json"].encode("utf-8"))
    assert record is not None
    canonical.check_value(record)
    assert canonical.canonical_bytes(record) == expected
    assert canonical.digest(record) == case["sha256"] == hashlib.sha256(expected).hexdigest()


@pytest.mark.parametrize("case", INVALID, ids=[c["name"] for c in INVALID])
def test_invalid_lines_are_not_records_the_client_accepts(case):
    line = bytes.fromhex(case["hex"])
    if case["name"] == "boolean_as_integer":
        # Well-formed JSON; it is the envelope's rule (an integer v) that refuses it, which the journal
        # checks on reopening.
        record = canonical.parse_record(line)
        assert record is not None and record["v"] is True
        return
    assert canonical.parse_record(line) is None


def test_the_journal_writes_the_chained_journal_byte_for_byte(tmp_path):
    records = CHAIN["records"]
    objs = [json.loads(r["line"]) for r in records]
    stamps = iter([o["at"] for o in objs])
    path = tmp_path / "chain.jsonl"
    with Journal(path, run=CHAIN["run"], clock=lambda: next(stamps)) as journal:
        for obj in objs:
            kind = obj["kind"]
            if kind == "turn_planned":
                journal.plan(obj["turn"], obj["lineage"], phases=obj["phases"])
            elif kind == "phase_committed":
                journal.commit(obj["turn"], obj["phase"])
            elif kind == "intent_dispatched":
                journal.dispatch(
                    obj["turn"], obj["intent"], obj["effect_class"], idempotency_key=obj["idempotency_key"]
                )
            elif kind == "effect_observed":
                journal.observe(obj["turn"], obj["intent"], obj["outcome"])
            elif kind == "fork":
                assert journal.fork(obj["from_lsn"], obj["reason"]) == obj["new_branch"]
            elif kind == "turn_terminal":
                journal.terminal(obj["turn"], obj["status"])
            elif kind == "checkpoint":
                # The client writes the digest it is given; the fold's digest is the engine's.
                journal.checkpoint(obj["covers_lsn"], obj["state_digest"])
            else:  # pragma: no cover - the vectors hold only the kinds above
                raise AssertionError(kind)
        written = journal.entries
    assert [e.line.decode("utf-8") for e in written] == [r["line"] for r in records]
    assert [(e.branch, e.lsn) for e in written] == [(r["branch"], r["lsn"]) for r in records]
    for entry, record in zip(written, records, strict=True):
        assert hashlib.sha256(entry.line).hexdigest() == record["sha256"]
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == CHAIN["journal_sha256"]
    # Reopening reads the chain back and continues it: the next record chains to the checkpoint.
    with Journal(path, run=CHAIN["run"], clock=lambda: "2026-01-01T00:01:00Z") as journal:
        assert journal.high_water() == {0: 4, 1: 4}
        nxt = journal.plan("t2", "job-2")
    assert nxt["prev"] == records[-1]["sha256"]
    assert (nxt["branch"], nxt["lsn"]) == (1, 5)
