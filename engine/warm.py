"""The last few folds kept in memory, so that a process that assesses the same run again skips reading its
snapshot (a speed path of ``assess_incremental``; it never changes a result or a snapshot's bytes).

Justified by ``benchmarks/bench_incremental.py`` ("resumed batch, fold kept in memory" beside "resumed
batch"): on a run of 100,000 turns, reading the snapshot back (rows parsed, fold rebuilt, the old fold
freed) is about half of a resumed batch (docs/perf/2026-12-06-incremental-engine.md).

A kept fold is served only for exactly the bytes it wrote (the same digest, evidence and bytes), and only
once: the batch that takes it folds into it, so nothing else may read it afterwards. Before it is kept, it
drops what a fold read back from its bytes would not have (points already used, points found unreachable
in the batch before), so both go on alike and write the same next bytes (tests/engine compares them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

from .assess import Assessor

# A worker serves many runs, and a kept fold holds about 1.4 kB per turn (140 MB for 100,000 turns,
# measured with tracemalloc): a few, not more.
KEEP = 2


class _Kept(NamedTuple):
    evidence: str
    data: bytes
    assessor: Assessor


_kept: OrderedDict[str, _Kept] = OrderedDict()
_lock = threading.Lock()


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
        return None
    with _lock:
        kept = _kept.pop(digest, None)
    if kept is None or kept.evidence != evidence or (kept.data is not data and kept.data != data):
        return None
    return kept.assessor


def forget_warm_folds() -> None:
    """Drop every kept fold (tests; a worker that wants its memory back)."""
    with _lock:
        _kept.clear()
