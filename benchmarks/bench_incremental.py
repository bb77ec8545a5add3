"""Incremental assessment on a large journal: what one small batch costs when the fold resumes from a snapshot.

    python -m benchmarks.bench_incremental                    # ~1,000,000 records, ~100,000 turns
    python -m benchmarks.bench_incremental --records 100000   # smaller

The journal is bench_engine's (generated once and cached). Its last ``--tail`` lines are the new batch;
the rest is folded once into a snapshot. Printed, the least CPU time of ``--rounds`` (other load on a
shared machine disturbs it least): the full fold of the whole journal; the snapshot's size; snapshot_load;
the resumed batch (assess_incremental, everything: seal check, rows read, the batch folded, the new
snapshot written, the assessment); and its parts: the rows parsed (orjson), the fold rebuilt from them,
the fold written as rows, one sha256 pass, finish (which decides every turn, so it grows with the run
too). See docs/perf/2026-12-06-incremental-engine.md.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.bench_engine import journal
from engine import assess, assess_incremental, snapshot_load
from engine.assess import Assessor, cycle_collection_paused


def _best(rounds: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """The least CPU time of `rounds` runs (other load on a shared machine disturbs it least) and the result."""
    best, out = float("inf"), None
    for _ in range(rounds):
        started = time.process_time()
        out = work()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_incremental")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tail", type=int, default=100, help="lines in the resumed batch")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    path = journal(args.records)
    head, tail = _split(path, args.tail)
    rounds = args.rounds

    full, result = _best(rounds, lambda: assess(path))
    print(f"journal: {result.records:,} records, {len(result.turns):,} turns, {len(result.branches)} branches")
    print(f"full fold (assess):              {full:7.3f} s")
    first, (_, snapshot) = _best(1, lambda: assess_incremental(None, head))
    print(f"first fold + snapshot:           {first:7.3f} s   snapshot {len(snapshot.data) / 1e6:.1f} MB")
    loaded, _ = _best(rounds, lambda: snapshot_load(snapshot.data))
    print(f"snapshot_load (seal, sha256):    {loaded:7.3f} s")
    resumed, (incremental, _) = _best(rounds, lambda: assess_incremental(snapshot, tail))
    assert incremental == result
    faster = full / resumed
    print(f"resumed batch of {args.tail} lines:       {resumed:7.3f} s   ({faster:.1f}x faster than the full fold)")

    body = snapshot.data.split(b"\n")[1]
    with cycle_collection_paused():  # as assess_incremental reads and writes a snapshot
        parsed, rows = _best(rounds, lambda: orjson.loads(body))
        rebuilt, assessor = _best(rounds, lambda: Assessor.from_state_rows(rows, {}))
        written, _ = _best(rounds, lambda: orjson.dumps(assessor.state_rows()))
        finished, _ = _best(rounds, lambda: assessor.finish({}))
    hashed, _ = _best(rounds, lambda: hashlib.sha256(snapshot.data).hexdigest())
    print(f"  rows parsed (orjson.loads):    {parsed:7.3f} s")
    print(f"  fold rebuilt from rows:        {rebuilt:7.3f} s")
    print(f"  fold written as rows + dumps:  {written:7.3f} s")
    print(f"  one sha256 pass:               {hashed:7.3f} s")
    print(f"  finish (every turn decided):   {finished:7.3f} s")
    head.unlink()
    tail.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
