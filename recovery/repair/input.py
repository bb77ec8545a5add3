"""What a journal repair makes the engine read, and the typed blocks it adds (docs/repair.md).

Used by the assessment (recovery/services.py) and the repair's preview (recovery/repair/services.py) alike, so that a
preview is exactly the assessment the repair would produce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, cast

from engine.types import Assessment as EngineAssessment
from engine.types import Decision, TurnDecision
from journals.models import JournalRecord, Turn
from journals.storable import storable
from kernel.dialect import values_read
from recovery.repair.models import ACCEPT_PREFIX, REPAIR_QUARANTINED, JournalRepair

if TYPE_CHECKING:
    from django.db.models import QuerySet

CHUNK = 5000


def stored_lines(run_pk: int, after: int, through: int) -> Iterator[bytes]:
    """The stored records' bytes with after < seq <= through, in seq order, streamed in chunks."""
    while after < through:
        rows = values_read(
            model=JournalRecord,
            fields=("seq", "line"),
            where={"run": run_pk, "seq__gt": after, "seq__lte": through},
            order_by=("seq",),
            limit=CHUNK,
        )
        if not rows:
            return
        for seq, line in rows:
            after = seq
            yield bytes(line)


def replacement_lines(data: bytes) -> list[bytes]:
    """The corrected journal's lines, each without the newline that ended it (a last line without one is
    a line too, as in a file)."""
    lines = bytes(data).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def repaired_lines(run_pk: int, last_seq: int, tail: Iterable[bytes], repair: JournalRepair) -> Iterator[bytes]:
    """The lines the engine reads under ``repair``: the accepted prefix (or the corrected journal), then the
    records stored since the repair, then the kept corrupt lines of imported packages."""
    if repair.kind == ACCEPT_PREFIX:
        yield from stored_lines(run_pk, 0, int(repair.through_seq or 0))
    else:
        yield from replacement_lines(bytes(repair.replacement))
    yield from stored_lines(run_pk, repair.at_seq, last_seq)
    yield from tail


def quarantined_records(repair: JournalRepair) -> QuerySet[JournalRecord]:
    """The records an accepted prefix quarantined that name a turn (none for a supersede)."""
    if repair.kind != ACCEPT_PREFIX:
        return JournalRecord.objects.none()
    return JournalRecord.objects.filter(
        run_id=repair.run_id, seq__gt=repair.through_seq, seq__lte=repair.at_seq, turn__isnull=False
    )


def quarantined_turn_rows(repair: JournalRepair, limit: int = 50) -> list[tuple[int, str]]:
    """(pk, turn id) of the turns the repair set aside, in journal order, at most ``limit`` (one query)."""
    turns = Turn.objects.filter(run_id=repair.run_id, turn_id__in=quarantined_records(repair).values("turn"))
    return list(turns.order_by("first_seq", "id").values_list("pk", "turn_id")[:limit])


def quarantined_turns(repair: JournalRepair) -> list[str]:
    """The turns with a record in the quarantined part of an accepted prefix (none for a supersede)."""
    turns = quarantined_records(repair).order_by().values_list("turn", flat=True).distinct()
    return sorted(cast("QuerySet[JournalRecord, str]", turns))  # turn__isnull=False: no None among them


def _held(turn: str, decision: TurnDecision | None) -> TurnDecision:
    if decision is not None:
        return dataclasses.replace(
            decision, decision=Decision.BLOCKED, reason=REPAIR_QUARANTINED, resume_from=None, reason_line=None
        )
    return TurnDecision(
        turn=turn,
        lineage=None,
        branch=0,
        decision=Decision.BLOCKED,
        resume_from=None,
        reason=REPAIR_QUARANTINED,
        completed_phases=(),
        intents=(),
    )


def repaired_result(result: EngineAssessment, repair: JournalRepair) -> EngineAssessment:
    """The engine's answer with the repair's typed blocks: a turn with a quarantined record never proceeds
    on the part of its history the engine was allowed to read (an effect may hide in what was set aside)."""
    held = set(quarantined_turns(repair))
    if not held:
        return result
    turns: list[TurnDecision] = []
    seen: set[str] = set()
    for td in result.turns:
        key = storable(td.turn) if isinstance(td.turn, str) else None
        if key in held:
            seen.add(key)
            turns.append(_held(key, td))
        else:
            turns.append(td)
    turns.extend(_held(turn, None) for turn in sorted(held - seen))
    return dataclasses.replace(result, turns=tuple(turns))
