"""The client's local journal (no server): the contract's v2 records that the engine reads without a
violation, reopening that continues the chain, a torn tail reported and never dropped, refusals that
write nothing, and the effect helper's readbacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loopx_client import (
    DEFAULT_PHASES,
    EffectFailed,
    Journal,
    JournalClosed,
    JournalCorrupt,
    JournalError,
    JournalMismatch,
    RecordRefused,
    UnsafeRedispatch,
)

from engine import assess, digest, fold_state


def full_turn(journal: Journal, turn: str) -> None:
    journal.plan(turn, f"job-{turn}")
    for phase in DEFAULT_PHASES:
        if phase == "dispatch":
            with journal.effect(turn, f"{turn}-read", "safe"):
                pass
            with journal.effect(turn, f"{turn}-write", "idempotent", idempotency_key=f"k-{turn}"):
                pass
            with journal.effect(turn, f"{turn}-send", "unsafe", local_write_ahead=True):
                pass
        journal.commit(turn, phase)
    journal.terminal(turn)


def decisions(path: Path) -> dict[str, str]:
    result = assess(path)
    assert result.violations == (), result.violations
    return {t.turn: t.decision.value for t in result.turns}


def test_a_journal_the_engine_reads_without_violation(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        full_turn(journal, "t1")
        journal.plan("t2", "job-t2", phases=["plan", "act"])
        journal.commit("t2", "plan")
    assert decisions(path) == {"t1": "complete", "t2": "resume"}
    lines = path.read_bytes().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert (first["v"], first["branch"], first["lsn"], "prev" in first) == (2, 0, 0, False)
    assert second["prev"] == digest(first) and second["lsn"] == 1
    assert path.read_bytes().endswith(b"\n")


def test_reopening_continues_the_chain_and_lsns(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
    with Journal(path, run="r1") as journal:
        assert journal.high_water() == {0: 1}
        record = journal.commit("t1", "envelope")
        assert record["lsn"] == 2
    assert decisions(path) == {"t1": "resume"}
    with pytest.raises(JournalMismatch):
        Journal(path, run="another-run")


def test_forks_and_checkpoints(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
        back_to = journal.commit("t1", "envelope")["lsn"]
        journal.commit("t1", "dispatch")
        assert journal.fork(back_to, "the reply was lost: take another path") == 1
        journal.commit("t1", "dispatch")
        covers = journal.high_water()[1]
        # The checkpoint's digest is the server's fold (the client never computes it): here the engine's.
        state = fold_state(path, 1, covers)
        journal.checkpoint(covers, digest(state), state=state)
    with Journal(path, run="r1") as journal:  # reopened on the live branch
        assert journal.branch == 1
        journal.commit("t1", "execute")
    assert decisions(path) == {"t1": "resume"}


def test_a_torn_tail_is_reported_and_left_as_it_is(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        line = json.dumps({"cut": "short"}).encode()
    intact = path.read_bytes()
    path.write_bytes(intact + line[:7])  # a write cut short: no final newline, not a complete object
    with pytest.raises(JournalCorrupt) as caught:
        Journal(path, run="r1")
    error = caught.value
    assert (error.line, error.offset, error.torn_tail) == (2, len(intact), True)
    assert path.read_bytes() == intact + line[:7]  # never silently truncated
    assert assess(path).violations[0].code == "storage_corruption"


def test_damage_before_the_end_is_corruption_not_a_torn_tail(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"{not json\n" + lines[1])
    with pytest.raises(JournalCorrupt) as caught:
        Journal(path, run="r1")
    assert (caught.value.line, caught.value.torn_tail) == (2, False)


def test_a_complete_last_record_without_its_newline_counts_and_the_next_write_ends_its_line(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    with Journal(path, run="r1") as journal:
        journal.commit("t1", "plan")
    assert len(path.read_bytes().splitlines()) == 2
    assert decisions(path) == {"t1": "resume"}


def test_refused_records_write_nothing(tmp_path):
    path = tmp_path / "j.jsonl"
    journal = Journal(path, run="r1")
    journal.plan("t1", "job")
    before = path.read_bytes()
    attempts = [
        lambda: journal.commit("t1", "plan", ratio=0.5),  # a float
        lambda: journal.commit("nope", "plan"),  # unknown_turn
        lambda: journal.plan("t2", ""),  # lineage_missing
        lambda: journal.plan("t1", "other"),  # lineage_conflict
        lambda: journal.dispatch("t1", "i", "idempotent"),  # idempotency_key_missing
        lambda: journal.dispatch("t1", "i", "sometimes"),  # type: ignore[arg-type]
        lambda: journal.observe("t1", "never", "succeeded"),  # intent_unknown
        lambda: journal.append("phase_committed", turn="t1", phase="plan", lsn=7),  # the envelope is ours
        lambda: journal.fork(5, "ahead of itself"),
        lambda: journal.commit("t1", "plan", note="\ud800"),  # a lone surrogate
    ]
    for attempt in attempts:
        with pytest.raises(RecordRefused):
            attempt()
    assert path.read_bytes() == before
    journal.close()
    with pytest.raises(JournalClosed):
        journal.commit("t1", "plan")


def test_one_writer_at_a_time(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1"), pytest.raises(JournalError):
        Journal(path, run="r1")
    Journal(path, run="r1").close()


def test_the_effect_helper_journals_dispatch_before_and_readback_after(tmp_path):
    path = tmp_path / "j.jsonl"
    journal = Journal(path, run="r1")
    journal.plan("t1", "job")
    seen: list[int] = []
    with journal.effect("t1", "ok", "unsafe", local_write_ahead=True) as effect:
        seen.append(len(path.read_bytes().splitlines()))  # the dispatch is on disk before the body runs
    assert seen == [2] and effect.readback is not None and effect.readback["outcome"] == "succeeded"

    with pytest.raises(EffectFailed), journal.effect("t1", "refused", "unsafe", local_write_ahead=True):
        raise EffectFailed("the provider refused the charge")
    assert journal.readback("t1", "refused") == "failed"

    with pytest.raises(ValueError), journal.effect(
        "t1", "bad-input", "unsafe", local_write_ahead=True, failed_on=(ValueError,)
    ):
        raise ValueError("rejected before sending")
    assert journal.readback("t1", "bad-input") == "failed"

    with pytest.raises(TimeoutError), journal.effect("t1", "timeout", "unsafe", local_write_ahead=True):
        raise TimeoutError("no reply")  # it may have gone out: fail closed
    assert journal.readback("t1", "timeout") == "unknown"

    with pytest.raises(KeyboardInterrupt), journal.effect("t1", "interrupted", "safe"):
        raise KeyboardInterrupt
    assert journal.readback("t1", "interrupted") == "unknown"

    with journal.effect("t1", "told", "idempotent", idempotency_key="k") as effect:
        effect.failed()
    assert journal.readback("t1", "told") == "failed"

    # An unsafe intent is sent again only after a `failed` readback.
    for intent in ("ok", "timeout"):
        with pytest.raises(UnsafeRedispatch):
            journal.dispatch("t1", intent, "unsafe")
    with journal.effect("t1", "refused", "unsafe", local_write_ahead=True):
        pass
    journal.close()
    result = assess(path)
    assert result.violations == ()
    intents = {i.intent: i.resolution.value for i in result.turns[0].intents}
    assert intents["timeout"] == "indeterminate" and intents["refused"] == "settled"
    assert result.turns[0].reason == "effect_indeterminate"
