"""Layer: failpoints. A runtime's function-call cycle, crashed at every transition: each crash leaves a
journal prefix, and the assessment of each prefix must say what a careful operator would (docs/contract.md
sections 1 and 6). Each prefix is assessed twice from the file, with identical output, and the journal's
bytes and mtime are untouched."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine import assess
from tests.engine.helpers import to_json, write_journal, writer


@dataclass(frozen=True)
class Failpoint:
    name: str
    records: int  # how many records of the full cycle reached the disk
    decision: str
    resume_from: str | None
    reason: str | None
    intents: tuple[tuple[str, str], ...]  # (intent, resolution)
    terminal: str | None = None


def _cycle() -> list[bytes]:
    """plan -> envelope -> [call charge (unsafe), lookup (safe), store (idempotent)] -> dispatch committed ->
    execute -> readback -> writeback -> spend -> terminal."""
    w = writer(run="run-cycle")
    w.plan("t1", "job-1")  # 1
    w.commit("t1", "plan")  # 2
    w.commit("t1", "envelope")  # 3
    w.dispatch("t1", "charge", "unsafe", args_digest="sha256:ab")  # 4: the call went out
    w.observe("t1", "charge", "succeeded")  # 5: its response came back
    w.dispatch("t1", "lookup", "safe")  # 6
    w.dispatch("t1", "store", "idempotent", key="store-t1")  # 7
    w.observe("t1", "store", "succeeded")  # 8
    w.commit("t1", "dispatch")  # 9
    w.commit("t1", "execute")  # 10
    w.observe("t1", "lookup", "succeeded")  # 11
    for phase in ["readback", "writeback", "spend"]:  # 12-14
        w.commit("t1", phase)
    w.terminal("t1", "completed")  # 15
    return w.lines


FAILPOINTS = [
    Failpoint("before-planning", 0, "", None, None, ()),
    Failpoint("after-planning", 1, "resume", "plan", None, ()),
    Failpoint("before-the-call-is-recorded", 3, "resume", "dispatch", None, ()),
    Failpoint(
        "after-the-call-before-its-response", 4, "blocked", None, "effect_indeterminate", (("charge", "indeterminate"),)
    ),
    Failpoint("after-the-response", 5, "resume", "dispatch", None, (("charge", "settled"),)),
    Failpoint("after-a-safe-call", 6, "resume", "dispatch", None, (("charge", "settled"), ("lookup", "replay"))),
    Failpoint(
        "after-an-idempotent-call",
        7,
        "resume",
        "dispatch",
        None,
        (("charge", "settled"), ("lookup", "replay"), ("store", "reissue")),
    ),
    Failpoint(
        "after-its-response",
        8,
        "resume",
        "dispatch",
        None,
        (("charge", "settled"), ("lookup", "replay"), ("store", "settled")),
    ),
    Failpoint(
        "after-dispatch-committed",
        9,
        "resume",
        "execute",
        None,
        (("charge", "settled"), ("lookup", "replay"), ("store", "settled")),
    ),
    Failpoint(
        "before-the-terminal-record",
        14,
        "finalize",
        None,
        None,
        (("charge", "settled"), ("lookup", "settled"), ("store", "settled")),
    ),
    Failpoint(
        "after-the-terminal-record",
        15,
        "complete",
        None,
        None,
        (("charge", "settled"), ("lookup", "settled"), ("store", "settled")),
        "completed",
    ),
]


@pytest.mark.parametrize("fp", FAILPOINTS, ids=[fp.name for fp in FAILPOINTS])
def test_each_crash_prefix_decides_as_expected(fp: Failpoint, tmp_path: Path) -> None:
    path = write_journal(tmp_path / "j.jsonl", _cycle()[: fp.records])
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    first, second = assess(path), assess(path)
    assert to_json(first) == to_json(second)
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before
    assert first.violations == ()
    if fp.records == 0:
        assert first.turns == ()
        return
    [t] = first.turns
    assert (t.decision.value, t.resume_from, t.reason, t.terminal) == (
        fp.decision,
        fp.resume_from,
        fp.reason,
        fp.terminal,
    )
    assert tuple((i.intent, i.resolution) for i in t.intents) == fp.intents
    if fp.decision == "resume":
        # Only the missing phases run: everything before resume_from is committed.
        assert t.completed_phases == t.phases[: t.phases.index(fp.resume_from)]


@pytest.mark.parametrize("cut", [1, 10, -1], ids=["first-byte", "middle", "all-but-the-brace"])
@pytest.mark.parametrize("records", [1, 4, 15], ids=["planning", "the-call", "terminal"])
def test_a_crash_in_the_middle_of_writing_a_record_blocks_until_repaired(
    records: int, cut: int, tmp_path: Path
) -> None:
    lines = _cycle()[:records]
    torn = lines[-1][:cut]
    path = write_journal(tmp_path / "j.jsonl", [*lines[:-1], torn], final_newline=False)
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    first, second = assess(path), assess(path)
    assert to_json(first) == to_json(second)
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before
    assert [v.code for v in first.violations] == ["storage_corruption"]
    assert first.records == records - 1
    assert all((t.decision.value, t.reason) == ("blocked", "storage_corruption") for t in first.turns)


def test_the_writer_believes_more_was_committed_than_the_disk_holds(tmp_path: Path) -> None:
    # The runtime wrote 5 records and believes lsn 4 committed; the disk kept only 4 (a lost write).
    path = write_journal(tmp_path / "j.jsonl", _cycle()[:4])
    result = assess(path, expect={0: 4})
    assert [v.code for v in result.violations] == ["offset_mismatch"]
    assert [(t.decision.value, t.reason) for t in result.turns] == [("blocked", "offset_mismatch")]
    assert assess(path, expect={0: 3}).violations == ()
