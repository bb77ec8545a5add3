"""Chain verification: re-read stored records and compare them with what ingest recorded.

What ingest recorded, per record: the digest of its bytes (``JournalRecord.digest``), its branch and lsn
(columns), its place (``seq``, 1, 2, 3, ... per run); per run: the count, the last seq and a running
digest over the record digests in seq order (``Run.prefix_digest``). A pass re-derives all of it from the
stored bytes and compares:

- ``storage_corruption``: bytes that no longer parse or no longer hash to the recorded digest, envelope
  columns that disagree with the bytes, a seq missing, or (at the end of the run) a count or running
  digest different from the run's: rows were changed, lost or added behind ingest's back;
- ``chain_broken``: a v2 record whose ``prev`` is not the digest of the record before it on its branch
  (of its fork record, for lsn 0 of a forked branch; none for lsn 0 of branch 0), or an lsn out of
  sequence on its branch (contract sections 1 and 4). A journal that arrived with such a break is
  reported too: the assessment already blocks it, and the finding is where an operator owns it.

Nothing is ever repaired: each difference is a finding that blocks the run (recovery/findings/models.py). The pass
is incremental: ``ChainCursor`` keeps, per run, the seq verified through, the running digest and the
per-branch continuation, so that a pass reads only new records; ``chain_rewind_oldest`` sends a few fully
verified runs back to seq 0 each pass so that old records are re-read too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from audits.models import ChainCursor
from engine.canonical import parse_line
from journals.models import EMPTY_PREFIX_DIGEST, JournalRecord, Run

CHUNK = 2000


@dataclass(frozen=True)
class Problem:
    kind: str  # chain_broken | storage_corruption
    fact_key: str
    evidence: dict[str, Any]


@dataclass
class ChainResult:
    records: int = 0
    verified_seq: int = 0
    complete: bool = False
    problems: list[Problem] = field(default_factory=list)


class _Walk:
    """The running checks, resumable from a cursor's saved state."""

    def __init__(self, run: Run, cursor: ChainCursor) -> None:
        self.run = run
        self.seq = cursor.verified_seq
        self.prefix = cursor.prefix_digest
        state = cursor.state or {}
        # branch -> [next lsn, digest of the last record]; new branch -> digest of the fork record
        self.branches: dict[int, list[Any]] = {int(k): v for k, v in state.get("branches", {}).items()}
        self.forks: dict[int, str] = {int(k): v for k, v in state.get("forks", {}).items()}
        self.problems: list[Problem] = []

    def state(self) -> dict[str, Any]:
        return {
            "branches": {str(k): v for k, v in sorted(self.branches.items())},
            "forks": {str(k): v for k, v in sorted(self.forks.items())},
        }

    def corrupt(self, key: str, **evidence: Any) -> None:
        self.problems.append(Problem("storage_corruption", key, evidence))

    def broken(self, key: str, **evidence: Any) -> None:
        self.problems.append(Problem("chain_broken", key, evidence))

    def feed(self, seq: int, branch: int, lsn: int, stored_digest: str, line: bytes) -> None:
        if seq != self.seq + 1:
            self.corrupt(
                f"seq:{self.seq + 1}",
                detail="records are missing from the stored sequence",
                expected_seq=self.seq + 1,
                found_seq=seq,
            )
        self.seq = seq
        # The running digest is over the digests ingest recorded, exactly as ingest chained them.
        self.prefix = hashlib.sha256((self.prefix + stored_digest).encode()).hexdigest()
        parsed = parse_line(line)
        obj = parsed.obj
        if obj is None:
            # Never quote the bytes (contract section 8): say where, not what.
            self.corrupt(f"record:{seq}", detail="the stored bytes are no longer one JSON object", seq=seq,
                         branch=branch, lsn=lsn)
            return
        digest = parsed.digest or hashlib.sha256(line).hexdigest()
        if digest != stored_digest:
            self.corrupt(f"record:{seq}", detail="the stored bytes no longer hash to the digest recorded at ingest",
                         seq=seq, branch=branch, lsn=lsn, recorded_digest=stored_digest, stored_bytes_digest=digest)
        if obj.get("branch") != branch or obj.get("lsn") != lsn or obj.get("run") != self.run.run_id:
            self.corrupt(f"envelope:{seq}", detail="the stored bytes name another run, branch or lsn than the row",
                         seq=seq, branch=branch, lsn=lsn)
        expected_lsn, last_digest = self.branches.get(branch, [0, None])
        if lsn != expected_lsn:
            self.broken(f"lsn:{branch}:{lsn}", detail="lsn out of sequence on its branch", seq=seq, branch=branch,
                        lsn=lsn, expected_lsn=expected_lsn)
        if obj.get("v") == 2:
            if last_digest is not None:
                expected_prev: str | None = last_digest
            elif branch == 0:
                expected_prev = None
            else:
                expected_prev = self.forks.get(branch, "")  # "": a branch no fork created (fork_invalid)
            if expected_prev != "" and obj.get("prev") != expected_prev:
                self.broken(f"prev:{branch}:{lsn}", detail="prev is not the digest of the record before it",
                            seq=seq, branch=branch, lsn=lsn, expected_prev=expected_prev)
        self.branches[branch] = [max(expected_lsn, lsn + 1), digest]
        new_branch = obj.get("new_branch")
        if obj.get("kind") == "fork" and type(new_branch) is int and new_branch not in self.forks:
            self.forks[new_branch] = digest

    def finish(self, run: Run) -> None:
        """At the run's end: the count and running digest must be ingest's."""
        if self.seq != run.last_seq or self.prefix != run.prefix_digest or run.record_count != run.last_seq:
            self.corrupt(
                "prefix",
                detail="the stored records do not add up to the prefix ingest committed",
                committed_records=run.record_count,
                committed_last_seq=run.last_seq,
                stored_last_seq=self.seq,
                prefix_digest_matches=self.prefix == run.prefix_digest,
            )


def chain_verify_run(*, run: Run, max_records: int) -> ChainResult:
    """Verify up to ``max_records`` records of ``run`` after its cursor; save the cursor."""
    run = Run.objects.get(pk=run.pk)  # the committed prefix now: a consistent snapshot (ingest is atomic)
    # A new cursor starts at seq 0: its first pass is a full read.
    cursor, _ = ChainCursor.objects.get_or_create(run=run, defaults={"full_pass_at": timezone.now()})
    walk = _Walk(run, cursor)
    result = ChainResult()
    stop = min(run.last_seq, cursor.verified_seq + max(max_records, 0))
    after = cursor.verified_seq
    while after < stop:
        rows = list(
            JournalRecord.objects.filter(run=run, seq__gt=after, seq__lte=stop)
            .order_by("seq")
            .values_list("seq", "branch", "lsn", "digest", "line")[:CHUNK]
        )
        if not rows:
            break
        for seq, branch, lsn, digest, line in rows:
            walk.feed(seq, branch, lsn, digest, bytes(line))
            result.records += 1
        after = rows[-1][0]
    if after < stop:
        # Rows with the highest seqs are gone: the loop found nothing more to read.
        walk.corrupt(f"seq:{after + 1}", detail="records are missing from the stored sequence",
                     expected_seq=after + 1, found_seq=None)
        walk.seq = stop
    result.complete = walk.seq >= run.last_seq
    if result.complete:
        walk.finish(run)
    with transaction.atomic():
        ChainCursor.objects.filter(pk=run.pk).update(
            verified_seq=walk.seq, prefix_digest=walk.prefix, state=walk.state(), verified_at=timezone.now()
        )
    result.verified_seq = walk.seq
    result.problems = walk.problems
    return result


def chain_rewind_oldest(*, count: int, min_age: timedelta) -> int:
    """Send back to seq 0 the ``count`` fully verified runs whose last full read is the oldest, and older
    than ``min_age`` (LOOPX_CHAIN_FULL_PASS_MIN_AGE_SECONDS: how often a run is re-read in full)."""
    if count <= 0:
        return 0
    cursors = list(
        ChainCursor.objects.filter(verified_seq__gt=0, verified_seq__gte=F("run__last_seq"))
        .filter(Q(full_pass_at__isnull=True) | Q(full_pass_at__lte=timezone.now() - min_age))
        .order_by(F("full_pass_at").asc(nulls_first=True), "run_id")
        .values_list("run_id", flat=True)[:count]
    )
    return ChainCursor.objects.filter(run_id__in=cursors).update(
        verified_seq=0, prefix_digest=EMPTY_PREFIX_DIGEST, state={}, full_pass_at=timezone.now()
    )
