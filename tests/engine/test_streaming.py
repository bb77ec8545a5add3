"""The journal is streamed, never held in memory: the engine's memory grows with the number of turns (and
branches), not with the number of records (docs/engine.md, "How a journal is read")."""

from __future__ import annotations

import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from engine import assess
from engine.writer import JournalWriter
from tests.engine.helpers import PHASES, to_json

TURNS = 300


def _write(w: JournalWriter, turns: int, extra: int) -> None:
    """`turns` complete turns; each has `extra` additional records that add no state: retries of a safe
    and an idempotent intent with their readbacks, and re-plannings with the same plan."""
    for i in range(turns):
        name = f"turn-{i:05d}"
        w.plan(name, "job")
        w.commit(name, PHASES[0])
        w.dispatch(name, "read", "safe")
        w.dispatch(name, "store", "idempotent", key=f"k-{i}")
        for n in range(extra):
            kind = n % 5
            if kind == 0:
                w.dispatch(name, "read", "safe")
            elif kind == 1:
                w.observe(name, "read", "unknown")
            elif kind == 2:
                w.dispatch(name, "store", "idempotent", key=f"k-{i}")
            elif kind == 3:
                w.observe(name, "store", "failed")
            else:
                w.plan(name, "job")
        w.observe(name, "read", "succeeded")
        w.observe(name, "store", "succeeded")
        for phase in PHASES[1:]:
            w.commit(name, phase)
        w.terminal(name)


def _file(path: Path, turns: int, extra: int) -> Path:
    with open(path, "wb") as fh:
        _write(JournalWriter("run-stream", sink=fh, keep_lines=False), turns, extra)
    return path


def _peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        result = fn()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_memory_grows_with_turns_not_with_records(tmp_path: Path) -> None:
    few = _file(tmp_path / "few.jsonl", TURNS, 0)
    many = _file(tmp_path / "many.jsonl", TURNS, 60)
    peak_few, result_few = _peak(lambda: assess(few))
    peak_many, result_many = _peak(lambda: assess(many))
    assert result_many.records > 5 * result_few.records
    assert result_few.violations == result_many.violations == ()
    assert [t.decision.value for t in result_many.turns] == ["complete"] * TURNS
    # Five times the records, (almost) the same memory.
    assert peak_many < 1.5 * peak_few, (peak_few, peak_many)
    more_turns = _file(tmp_path / "more-turns.jsonl", 4 * TURNS, 0)
    peak_more, _ = _peak(lambda: assess(more_turns))
    assert peak_more > 2 * peak_few, (peak_few, peak_more)  # the measure is sensitive to what does grow


def test_a_path_is_read_without_loading_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path / "j.jsonl", 40, 300)
    size = path.stat().st_size
    assert size > 2_000_000
    peak, result = _peak(lambda: assess(path))
    assert result.records > 12_000
    assert peak < size / 4, (peak, size)


def test_a_generator_factory_is_streamed_and_may_be_called_again(tmp_path: Path) -> None:
    path = _file(tmp_path / "j.jsonl", 40, 300)
    calls = 0

    def lines() -> Iterator[bytes]:
        nonlocal calls
        calls += 1
        with open(path, "rb") as fh:
            for raw in fh:
                yield raw.rstrip(b"\n")

    peak, result = _peak(lambda: assess(lines))
    assert calls >= 1
    assert peak < path.stat().st_size / 4, peak
    assert to_json(result) == to_json(assess(path))


def test_the_pre_scan_finds_every_fork_and_checkpoint_whatever_the_window(tmp_path: Path, monkeypatch) -> None:
    """The pre-scan reads a file in windows of whole lines; a fork or checkpoint line that straddles a
    window or is longer than it (a checkpoint with its state) must be found all the same."""
    import importlib

    engine_assess = importlib.import_module("engine.assess")
    w = JournalWriter("run-windows")
    for i in range(30):
        point = w.mark()
        w.plan(f"t{i}", "job")
        w.commit(f"t{i}", "plan")
        if i % 7 == 3:
            w.checkpoint(with_state=i % 2 == 1)
        if i % 5 == 4:
            w.fork(point)
    path = tmp_path / "j.jsonl"
    path.write_bytes(w.data())
    expected = engine_assess._prescan_lines(w.lines)
    assert sum(expected.values()) >= 10  # 6 forks and 4 checkpoints
    # ... the points the records name, read here with a full parse (the pre-scan reads a writer's
    # canonical prefix only).
    records = [orjson.loads(line) for line in w.lines]
    named = Counter(
        (r["branch"], r["from_lsn"] if r["kind"] == "fork" else r["covers_lsn"])
        for r in records
        if r["kind"] in ("fork", "checkpoint")
    )
    assert expected == named
    for size in (1, 7, 100, 1000, 1 << 20):
        monkeypatch.setattr(engine_assess, "_PRESCAN_BLOCK", size)
        assert engine_assess._Reader(path).prescan() == expected, size
        result = assess(path)
        assert result.violations == () and all(c["verified"] for c in result.checkpoints)
    path.write_bytes(w.data()[:-1])  # no final newline
    assert engine_assess._Reader(path).prescan() == expected
