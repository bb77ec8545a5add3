"""The last few folds kept in memory, so that a process that assesses the same run again skips reading its
snapshot (a speed path of ``assess_incremental``; it never changes a result or a snapshot's bytes).

Justified by ``benchmarks/bench_incremental.py`` ("resumed batch, fold kept in memory" beside "resumed
batch"): on a run of 100,000 turns, reading the snapshot back (rows parsed, fold rebuilt, the old fold
freed) is about half of a resumed batch (docs/perf/2026-12-06-incremental-engine.md).

A kept fold is served only for exactly the bytes it wrote (the same digest, evidence and bytes), and only
once: the batch that takes it folds into it, so nothing else may read it afterwards. Before it is kept, it
drops what a fold read back from its bytes would not have (points already used, points found unreachable
in the batch before), so both go on alike and write the same next bytes (tests/engine compares them).

A kept fold is also moved out of the cyclic collector's sight (``_out_of_collector_sight``): it holds
millions of objects and no cycle, and a full collection that walked them all grew with the run on every
batch of a long one (``benchmarks/bench_growth.py``; docs/perf/2026-12-06-growth-flat.md). The full
collection that frees the rest of the process's cycles waits in proportion to the heap
(``full_collection_due``; docs/perf/2026-12-07-full-collection.md).
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from typing import NamedTuple

from .assess import Assessor

# A worker serves many runs, and a kept fold holds about 1.4 kB per turn (140 MB for 100,000 turns,
# measured with tracemalloc), and about 0.4 kB more for the parts of its last snapshot: a few, not more.
KEEP = 2
# A full collection finds the cycles that the rest of the process dropped after they were moved out of the
# collector's sight, so that they cannot pile up in a long-lived worker. It walks every object alive, so its
# cost is the heap's size. It runs after FULL_COLLECTION_EVERY keeps, or after one keep for each
# FULL_COLLECTION_PER_OBJECTS objects the last one left alive when that is more: each batch of a run that
# grows batch by batch then pays about the same share of it however long the run (one every 100 keeps cost
# each batch more as the run grew). What it waits for stays small: it found a few dozen objects in 100 keeps.
FULL_COLLECTION_EVERY = 100
FULL_COLLECTION_PER_OBJECTS = 1000


class _Kept(NamedTuple):
    evidence: str
    data: bytes
    assessor: Assessor


_kept: OrderedDict[str, _Kept] = OrderedDict()
_lock = threading.Lock()
_keeps = 0  # keeps since the last full collection
_left_alive = 0  # objects alive just after it


def warm_fold(digest: str, evidence: str, data: bytes, assessor: Assessor | None = None) -> Assessor | None:
    """With ``assessor``: keep it as the fold whose snapshot is ``data`` (sha256 ``digest``, folded under the
    evidence whose digest is ``evidence``); returns None. Without: the fold kept for exactly that snapshot,
    taken out (it is served once), or None. ``KEEP`` folds at most, the least recently kept dropped first."""
    if assessor is not None:
        assessor.settle_points()
        with _lock:
            _kept[digest] = _Kept(evidence, data, assessor)
            _kept.move_to_end(digest)
            while len(_kept) > KEEP:
                _kept.popitem(last=False)
        _out_of_collector_sight()
        return None
    with _lock:
        kept = _kept.pop(digest, None)
    if kept is None or kept.evidence != evidence or (kept.data is not data and kept.data != data):
        return None
    return kept.assessor


def _out_of_collector_sight() -> None:
    """Move every object alive now, the kept fold's among them, to the collector's permanent generation
    (``gc.freeze``), which no collection walks. Reference counting still frees them when they are dropped:
    the fold's objects form no cycle (tests/engine/test_incremental.py proves it). The young generations are
    collected first, so that a cycle dropped just now is freed, not frozen; and when ``full_collection_due``,
    one full collection frees those dropped since."""
    global _keeps, _left_alive
    with _lock:
        _keeps += 1
        full = full_collection_due(keeps=_keeps, left_alive=_left_alive)
        if full:
            _keeps = 0
    if not full:
        gc.collect(1)
        gc.freeze()
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    alive = gc.get_freeze_count()  # it walks the frozen objects: once a full collection, a small part of it
    with _lock:
        _left_alive = alive


def full_collection_due(*, keeps: int, left_alive: int) -> bool:
    """Whether this keep runs a full collection: ``keeps`` since the last one (this one counted),
    ``left_alive`` the objects the last one left alive (0 before the first)."""
    return keeps >= max(FULL_COLLECTION_EVERY, left_alive // FULL_COLLECTION_PER_OBJECTS)


def forget_warm_folds() -> None:
    """Drop every kept fold (tests; a worker that wants its memory back)."""
    with _lock:
        _kept.clear()
