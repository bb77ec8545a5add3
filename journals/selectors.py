"""Reads of the journal store. Every projection of record content goes through `record_public`, which
applies the contract's section 8 (secret fields redacted) before anything leaves the store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.db.models import QuerySet

from engine.canonical import parse_line
from journals.access import EVERY_RUN, RunScope
from journals.models import (
    ApiToken,
    Branch,
    JournalRecord,
    Run,
    Turn,
)

# The ORM's turn rows and lookup serve both databases (the list's filtered pages, the timeline pages).
from journals.orm import TIMELINE
from journals.orm import turn_lookup as turn_lookup
from journals.orm import turn_rows as turn_rows
from journals.storable import storable_redacted
from journals.storable import usable_key as _usable_key
from journals.store import TurnRows, journal_store


def api_token_find(*, raw: str) -> ApiToken | None:
    """The active token with this value (looked up by its hash), or None.

    Every API request asks, and a revocation must hold at once in every process, so it is asked of the
    database each time (no cache), on the unique hash's index.
    """
    return journal_store().api_token_find(raw=raw)


def run_find(*, run_id: str) -> Run | None:
    if not _usable_key(run_id):
        return None
    return Run.objects.filter(run_id=run_id).first()


def runs_list(*, scope: RunScope = EVERY_RUN) -> QuerySet[Run]:
    """Runs in ``scope`` (journals.access: a token's prefix, a person's teams), newest change first."""
    return Run.objects.filter(scope.q("run_id")).order_by("-updated_at", "-id")


def turn_page_rows(*, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: Mapping[str, str]) -> TurnRows:
    """A turn list's rows (``turn_rows``), filtered by exact values (a valid decision, a status, a state: the
    list's fast path, journals.views.TurnListView), for CursorPagination."""
    return journal_store().turn_page_rows(scope=scope, run_id=run_id, exact=exact)


def turn_detail(*, run_id: str, turn_id: str) -> dict[str, Any] | None:
    """The API's answer for one turn (journals.serializers.TurnDetailSerializer's shape), or None: the turn
    and its run, its phases (with their committing records' places) and intents."""
    return journal_store().turn_detail(run_id=run_id, turn_id=turn_id)


def turns_with_timeline() -> QuerySet[Turn]:
    """Turns with their run and effective state joined, their phases (and committing records) and intents
    prefetched: a fixed query count."""
    return Turn.objects.select_related("run", "effective").prefetch_related(*TIMELINE)


def turn_with_timeline(*, turn: Turn) -> Turn:
    """The turn with its run and effective state joined, its phases (and committing records) and intents
    prefetched: a fixed query count."""
    return turns_with_timeline().get(pk=turn.pk)


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
        "record": storable_redacted(parsed.obj) if parsed.obj is not None else None,
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
