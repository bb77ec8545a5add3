"""Reads of the journal store. Every projection of record content goes through `record_public`, which
applies the contract's section 8 (secret fields redacted) before anything leaves the store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import F, Prefetch, QuerySet

from journals.models import TURN_ASSESSED_FIELDS, ApiToken, Branch, JournalRecord, Phase, Run, Turn
from journals.storable import is_storable, storable
from recovery.engine.canonical import parse_line
from recovery.engine.secrets import redact


def api_token_find(*, raw: str) -> ApiToken | None:
    """The active token with this value (looked up by its hash), or None."""
    if not raw:
        return None
    return ApiToken.objects.filter(token_hash=ApiToken.hash(raw), revoked_at__isnull=True).first()


def _usable_key(value: str) -> bool:
    # Ids from a URL may hold what no column can (a NUL on PostgreSQL): such an id names nothing.
    return 0 < len(value) <= 200 and is_storable(value)


def run_find(*, run_id: str) -> Run | None:
    if not _usable_key(run_id):
        return None
    return Run.objects.filter(run_id=run_id).first()


def runs_list(*, run_prefix: str = "") -> QuerySet[Run]:
    runs = Run.objects.all()
    if run_prefix:
        runs = runs.filter(run_id__startswith=run_prefix)
    return runs.order_by("-updated_at", "-id")


def turn_find(*, run: Run, turn_id: str) -> Turn | None:
    if not _usable_key(turn_id):
        return None
    return Turn.objects.filter(run=run, turn_id=turn_id).select_related("run").first()


def turn_lookup(*, run_id: str, turn_id: str, timeline: bool = False) -> Turn | None:
    """A turn by its run's id and its own, in one query (joined), with its timeline prefetched when asked."""
    if not (_usable_key(run_id) and _usable_key(turn_id)):
        return None
    turns = Turn.objects.select_related("run").filter(run__run_id=run_id, turn_id=turn_id)
    if timeline:
        turns = turns.prefetch_related(*_TIMELINE)
    return turns.first()


def turns_list(*, run_prefix: str = "") -> QuerySet[Turn]:
    turns = Turn.objects.select_related("run")
    if run_prefix:
        turns = turns.filter(run__run_id__startswith=run_prefix)
    return turns.order_by("-updated_at", "-id")


TURN_ROW_FIELDS = ("id", "turn_id", *TURN_ASSESSED_FIELDS, "created_at", "updated_at")


def turn_rows(*, run_prefix: str = "", run_id: str | None = None) -> QuerySet[Turn]:
    """Turns as plain rows (dicts, the run's id joined in) for list pages: building 50 model instances
    (and 50 runs) per page cost more than the page's query (benchmarks/bench_reads.py)."""
    turns = Turn.objects.all()
    if run_prefix:
        turns = turns.filter(run__run_id__startswith=run_prefix)
    if run_id is not None:
        turns = turns.filter(run__run_id=run_id)
    return turns.order_by("-updated_at", "-id").values(*TURN_ROW_FIELDS, run_key=F("run__run_id"))


_TIMELINE = (
    # The committing record's place, not its bytes: a timeline never shows raw lines.
    Prefetch("phases", queryset=Phase.objects.select_related("record").defer("record__line").order_by("position")),
    "intents",
)


def turn_with_timeline(*, turn: Turn) -> Turn:
    """The turn with its phases (and committing records) and intents prefetched: a fixed query count."""
    return Turn.objects.select_related("run").prefetch_related(*_TIMELINE).get(pk=turn.pk)


def turn_records(*, turn: Turn) -> QuerySet[JournalRecord]:
    return JournalRecord.objects.filter(run_id=turn.run_id, turn=turn.turn_id).order_by("seq")


def branches_list(*, run: Run) -> QuerySet[Branch]:
    return Branch.objects.filter(run=run).order_by("number")


def record_public(record: JournalRecord) -> dict[str, Any]:
    """A record as any page or API read may show it: envelope plus the redacted object."""
    parsed = parse_line(bytes(record.line))
    return {
        "seq": record.seq,
        "branch": record.branch,
        "lsn": record.lsn,
        "kind": record.kind,
        "v": record.v,
        "turn": record.turn,
        "digest": record.digest,
        # Stored lines are always JSON objects (ingest refuses anything else).
        "record": storable(redact(parsed.obj)) if parsed.obj is not None else None,
    }


def run_lines(*, run: Run, chunk: int = 2000) -> Iterator[bytes]:
    """The run's lines exactly as received, in seq order (the engine's input; raw bytes, not for display)."""
    last = 0
    while True:
        rows = list(
            JournalRecord.objects.filter(run=run, seq__gt=last).order_by("seq").values_list("seq", "line")[:chunk]
        )
        if not rows:
            return
        for seq, line in rows:
            last = seq
            yield bytes(line)


def journal_bytes(*, run: Run) -> bytes:
    """The journal byte-for-byte: every line as received, each ended by a newline, in seq order.

    Raw bytes carry secrets: only an operator's explicit export may hand them out (contract section 8).
    """
    return b"".join(line + b"\n" for line in run_lines(run=run))
