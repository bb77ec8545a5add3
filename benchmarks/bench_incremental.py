"""Incremental assessment on a large journal: what one small batch costs when the fold resumes from a snapshot.

    python -m benchmarks.bench_incremental                    # ~1,000,000 records, ~100,000 turns
    python -m benchmarks.bench_incremental --records 100000   # smaller
    python -m benchmarks.bench_incremental --grow 1000        # the run grown batch by batch (see grow)
    python -m benchmarks.bench_incremental --grow 1000 --rewind-window 0   # ... without the undo log

The journal is bench_engine's (generated once and cached). Its last ``--tail`` lines are the new batch;
the rest is folded once into a snapshot. Printed, the least CPU time of ``--rounds`` (other load on a
shared machine disturbs it least): the full fold of the whole journal; the snapshot's size; snapshot_load;
the resumed batch (assess_incremental, everything: seal check, rows read, the batch folded, the new
snapshot written, the assessment); and its steps: the parts parsed and the fold rebuilt from them, every
part written afresh, the parts of the tail's turns written again (what a kept fold's seal writes), one
sha256 pass over the parts, finish (which decides every turn, so it grows with the run too). Then the two
speed paths: the same batch when this process still holds the fold that wrote the snapshot
(engine/warm.py), and with ``changed_only=True`` as well (only the decisions the batch may change).
A run's growth is approximated by two sizes: ``--records 100000`` and the default, each with ``--tail 1000``.
See docs/perf/2026-12-06-incremental-engine.md.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.bench_engine import journal
from engine import REWIND_WINDOW, SnapshotUnusable, assess, assess_incremental, snapshot_load
from engine.assess import cycle_collection_paused, named_turns
from engine.parts import note_named, open_parts, seal_parts
from engine.warm import forget_warm_folds


def _best(rounds: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """The least CPU time of `rounds` runs (other load on a shared machine disturbs it least) and the result."""
    best, out = float("inf"), None
    for _ in range(rounds):
        started = time.process_time()
        out = work()
        best = min(best, time.process_time() - started)
    return best, out


def _best_after(rounds: int, setup: Callable[[], Any], work: Callable[[Any], Any]) -> tuple[float, Any]:
    """As _best, each round timing `work(setup())` but not the setup."""
    best, out = float("inf"), None
    for _ in range(rounds):
        ready = setup()
        started = time.process_time()
        out = work(ready)
        best = min(best, time.process_time() - started)
    return best, out


def _split(path: Path, tail: int) -> tuple[Path, Path]:
    """The journal as two files: every line but the last `tail`, and those."""
    data = path.read_bytes()
    cut = len(data)
    for _ in range(tail + 1):
        cut = data.rfind(b"\n", 0, cut)
    head_path, tail_path = path.with_suffix(".head"), path.with_suffix(".tail")
    head_path.write_bytes(data[: cut + 1])
    tail_path.write_bytes(data[cut + 1 :])
    return head_path, tail_path


def grow(path: Path, batch: int, window: int = REWIND_WINDOW) -> None:
    """The journal fed in batches of `batch` lines as a worker would (changed_only, the fold kept in memory
    with an undo log of `window` records per branch, a refused batch folded from the start), each batch's
    CPU time kept: the median of the first tenth of batches beside the median of the last tenth says how a
    batch's cost grows with the run; the slowest batch and the batches with a fork say what a fork costs (the
    journal's forks rewind 40 turns, about 440 records: engine/rewind.py)."""
    lines = path.read_bytes().splitlines()
    snapshot = None
    times: list[float] = []
    forked: list[float] = []
    refused = 0
    forget_warm_folds()
    for start in range(0, len(lines), batch):
        new = lines[start : start + batch]
        started = time.process_time()
        try:
            _, snapshot = assess_incremental(snapshot, new, changed_only=True, rewind_window=window)
        except SnapshotUnusable:
            refused += 1
            _, snapshot = assess_incremental(None, lines[: start + batch], changed_only=True, rewind_window=window)
        times.append(time.process_time() - started)
        if any(b'"kind":"fork"' in line for line in new):
            forked.append(times[-1])
    tenth = max(1, len(times) // 10)
    first, last = statistics.median(times[:tenth]), statistics.median(times[-tenth:])
    print(f"grown in {len(times):,} batches of {batch:,} lines, undo log {window:,} records per branch")
    print(f"  ({refused} refused, folded from the start)")
    print(f"  median batch, first tenth:     {first:7.4f} s")
    print(f"  median batch, last tenth:      {last:7.4f} s   ({last / first:.1f}x the first)")
    print(f"  median batch, all:             {statistics.median(times):7.4f} s")
    print(f"  slowest batch:                 {max(times):7.4f} s")
    print(f"  batches with a fork:           {', '.join(f'{t:.4f}' for t in forked)} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_incremental")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tail", type=int, default=100, help="lines in the resumed batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grow", type=int, default=0, help="only grow the run in batches of this many lines")
    parser.add_argument("--rewind-window", type=int, default=REWIND_WINDOW, help="the undo log's depth (--grow)")
    args = parser.parse_args(argv)
    path = journal(args.records)
    if args.grow:
        grow(path, args.grow, args.rewind_window)
        return 0
    head, tail = _split(path, args.tail)
    rounds = args.rounds

    full, result = _best(rounds, lambda: assess(path))
    print(f"journal: {result.records:,} records, {len(result.turns):,} turns, {len(result.branches)} branches")
    print(f"full fold (assess):              {full:7.3f} s")
    first, (_, snapshot) = _best(1, lambda: assess_incremental(None, head))
    size = (len(snapshot.data) + sum(map(len, snapshot.parts))) / 1e6
    print(f"first fold + snapshot:           {first:7.3f} s   snapshot {size:.1f} MB in {len(snapshot.parts)} parts")
    loaded, _ = _best(rounds, lambda: snapshot_load(snapshot.data, snapshot.parts))
    print(f"snapshot_load (seal, sha256):    {loaded:7.3f} s")
    forget_warm_folds()
    resumed, (incremental, _) = _best_after(rounds, forget_warm_folds, lambda _: assess_incremental(snapshot, tail))
    assert incremental == result
    faster = full / resumed
    print(f"resumed batch of {args.tail} lines:       {resumed:7.3f} s   ({faster:.1f}x faster than the full fold)")

    def warm() -> Any:  # the first fold again, so that this process holds the fold that wrote its snapshot
        forget_warm_folds()
        return assess_incremental(None, head)[1]

    kept, (incremental, _) = _best_after(rounds, warm, lambda held: assess_incremental(held, tail))
    assert incremental == result
    print(f"  fold kept in memory:           {kept:7.3f} s   ({full / kept:.1f}x)")
    changed, (partial, _) = _best_after(rounds, warm, lambda held: assess_incremental(held, tail, changed_only=True))
    assert partial.turns == tuple(d for d in result.turns if d.turn in {p.turn for p in partial.turns})
    listed = f"{len(partial.turns):,} turns listed"
    print(f"  kept, changed_only:            {changed:7.3f} s   ({full / changed:.1f}x; {listed})")
    forget_warm_folds()

    codecs = [codec for _, codec in orjson.loads(snapshot.data.split(b"\n")[0])["parts"]]
    stored = list(zip(snapshot.part_digests, codecs, snapshot.parts, strict=True))
    named = named_turns(tail)

    def afresh() -> Any:
        assessor.sealed = None  # no part kept from an earlier seal
        return seal_parts(assessor)

    def again() -> Any:
        note_named(assessor, named)  # as after the tail's batch: its turns' parts only
        return seal_parts(assessor)

    with cycle_collection_paused():  # as assess_incremental reads and writes a snapshot
        rebuilt, assessor = _best(rounds, lambda: open_parts(stored, {}))
        written, _ = _best(rounds, afresh)
        rewritten, _ = _best(rounds, again)
        finished, _ = _best(rounds, lambda: assessor.finish({}))
    hashed, _ = _best(rounds, lambda: [hashlib.sha256(part).hexdigest() for part in snapshot.parts])
    print(f"  parts parsed, fold rebuilt:    {rebuilt:7.3f} s")
    print(f"  every part written afresh:     {written:7.3f} s")
    print(f"  the tail's turns' parts again: {rewritten:7.3f} s   ({len(named or ())} turns named)")
    print(f"  one sha256 pass:               {hashed:7.3f} s")
    print(f"  finish (every turn decided):   {finished:7.3f} s")
    head.unlink()
    tail.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
