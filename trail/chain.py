"""The operator trail's chain: how a row's digest is computed, how rows are appended under the chain head's
lock, how the chain is verified again, and where an act came from (``via``).

One chain for the whole trail. A writer locks the single TrailHead row FOR UPDATE (on SQLite the
IMMEDIATE transaction already holds the database's write lock), reads the last seq and digest, writes its
row as seq + 1 chained from that digest, and moves the head, all in the caller's transaction: concurrent
writers wait for each other at the head, so no two rows ever share a predecessor, and a rolled-back change
takes its trail row and the head's move with it. The head is the last lock a transition takes (services
record their action after their other writes), so waiting on it never closes a cycle.

The digest covers every column the trail shows: seq, the previous digest, actor, actor name, kind, run,
turn, reason, before, after, time and via, in the contract's canonical JSON. Editing any of them, removing
a row, or adding one behind the writer's back breaks the chain (``trail_verify``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from engine.canonical import canonical_bytes
from journals.actors import Actor, person_of
from kernel.via import current_via
from trail.models import TRAIL_GENESIS, OperatorAction, TrailHead


def _when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def row_digest(
    *,
    seq: int,
    prev_digest: str,
    actor_id: int | None,
    actor_name: str,
    kind: str,
    run_id: int | None,
    turn_id: int | None,
    reason: str,
    before: Any,
    after: Any,
    created_at: datetime,
    via: str,
) -> str:
    body = {
        "seq": seq,
        "prev": prev_digest,
        "actor": actor_id,
        "actor_name": actor_name,
        "kind": kind,
        "run": run_id,
        "turn": turn_id,
        "reason": reason,
        "before": before,
        "after": after,
        "at": _when(created_at),
        "via": via,
    }
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def digest_of(row: OperatorAction) -> str:
    return row_digest(
        seq=row.seq,
        prev_digest=row.prev_digest,
        actor_id=row.actor_id,
        actor_name=row.actor_name,
        kind=row.kind,
        run_id=row.run_id,
        turn_id=row.turn_id,
        reason=row.reason,
        before=row.before,
        after=row.after,
        created_at=row.created_at,
        via=row.via,
    )


def _locked_head() -> TrailHead:
    head = TrailHead.objects.select_for_update().filter(pk=1).first()
    if head is not None:
        return head
    # The head row comes with the migration; a database emptied under it (a test's flush) starts again from
    # the last row it still has, and the verification says whether that row's chain holds.
    last = OperatorAction.objects.order_by("-seq").values_list("seq", "digest").first()
    TrailHead.objects.get_or_create(pk=1, defaults={"seq": last[0], "digest": last[1]} if last else {})
    return TrailHead.objects.select_for_update().get(pk=1)


def trail_append(
    *,
    actor: Actor,
    actor_name: str,
    kind: str,
    run: Any,
    turn: Any,
    reason: str,
    before: dict[str, Any],
    after: dict[str, Any],
    via_name: str | None = None,
) -> OperatorAction:
    """Append one row to the chain inside the caller's transaction (a savepoint when there is one)."""
    from django.utils import timezone

    with transaction.atomic():
        head = _locked_head()
        row = OperatorAction(
            actor=person_of(actor),
            actor_name=actor_name,
            kind=kind,
            run=run,
            turn=turn,
            reason=reason,
            before=before,
            after=after,
            created_at=timezone.now(),
            via=via_name or current_via(),
            seq=head.seq + 1,
            prev_digest=head.digest,
        )
        row.digest = digest_of(row)
        row.save()
        TrailHead.objects.filter(pk=1).update(seq=row.seq, digest=row.digest)
        return row


# --- verification ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrailProblem:
    fact_key: str
    evidence: dict[str, Any]


@dataclass
class TrailResult:
    rows: int = 0
    last_seq: int = 0
    problems: list[TrailProblem] = field(default_factory=list)


def _rows(chunk: int = 2000) -> Iterator[OperatorAction]:
    after = 0
    while True:
        rows = list(OperatorAction.objects.filter(seq__gt=after).order_by("seq")[:chunk])
        if not rows:
            return
        yield from rows
        after = rows[-1].seq


def trail_verify() -> TrailResult:
    """Re-read the whole trail in seq order: each row's digest recomputed from its columns, each prev the
    digest of the row before, seqs without a gap, and the chain's end where the head says it is. Never
    quotes a row's before/after (they may hold what was redacted only in part): says which row."""
    result = TrailResult()
    expected_seq, prev = 1, TRAIL_GENESIS
    for row in _rows():
        result.rows += 1
        if row.seq != expected_seq:
            result.problems.append(
                TrailProblem(f"seq:{expected_seq}", {"detail": "trail rows are missing", "expected_seq":
                                                     expected_seq, "found_seq": row.seq})
            )
        if row.prev_digest != prev:
            result.problems.append(
                TrailProblem(f"prev:{row.seq}", {"detail": "prev_digest is not the digest of the row before it",
                                                 "seq": row.seq, "action": row.pk})
            )
        if digest_of(row) != row.digest:
            result.problems.append(
                TrailProblem(f"row:{row.seq}", {"detail": "the row no longer hashes to its recorded digest",
                                                "seq": row.seq, "action": row.pk, "kind": row.kind})
            )
        expected_seq, prev = row.seq + 1, row.digest
        result.last_seq = row.seq
    head = TrailHead.objects.filter(pk=1).first()
    if head is not None and (head.seq != result.last_seq or head.digest != prev):
        result.problems.append(
            TrailProblem("head", {"detail": "the chain does not end where the trail head says it does",
                                  "head_seq": head.seq, "last_seq": result.last_seq})
        )
    return result
