"""Reads of the journal store. Every projection of record content goes through `record_public`, which
applies the contract's section 8 (secret fields redacted) before anything leaves the store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.db.models import CharField, F, Prefetch, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Cast

from engine.canonical import parse_line
from engine.secrets import redact
from journals.access import EVERY_RUN, RunScope
from journals.models import (
    STATE_ROW_FIELDS,
    TURN_ROW_FIELDS,
    ApiToken,
    Branch,
    Intent,
    JournalRecord,
    Phase,
    Run,
    Turn,
)
from journals.serializers import TurnDetailSerializer
from journals.storable import storable
from journals.storable import usable_key as _usable_key
from kernel.dialect import on_postgresql


def api_token_find(*, raw: str) -> ApiToken | None:
    """The active token with this value (looked up by its hash), or None.

    Every API request asks, and a revocation must hold at once in every process, so it is asked of the
    database each time (no cache), on the unique hash's index.
    """
    if not raw:
        return None
    # token_hash is unique: no ordering needed (``first()`` would sort by the model's ordering).
    return ApiToken.objects.filter(token_hash=ApiToken.hash(raw), revoked_at__isnull=True).order_by().first()


def run_find(*, run_id: str) -> Run | None:
    if not _usable_key(run_id):
        return None
    return Run.objects.filter(run_id=run_id).first()


def runs_list(*, scope: RunScope = EVERY_RUN) -> QuerySet[Run]:
    """Runs in ``scope`` (journals.access: a token's prefix, a person's teams), newest change first."""
    return Run.objects.filter(scope.q("run_id")).order_by("-updated_at", "-id")


def turn_lookup(*, run_id: str, turn_id: str, timeline: bool = False) -> Turn | None:
    """A turn by its run's id and its own, in one query (joined), with its timeline prefetched when asked."""
    if not (_usable_key(run_id) and _usable_key(turn_id)):
        return None
    turns = Turn.objects.select_related("run").filter(run__run_id=run_id, turn_id=turn_id)
    if timeline:
        turns = turns.select_related("effective").prefetch_related(*_TIMELINE)
    return turns.first()


def _turn_rows_base(run_key: F | Value) -> QuerySet[Turn, Mapping[str, Any]]:
    rows: QuerySet[Turn, Mapping[str, Any]] = Turn.objects.order_by("-updated_at", "-id").values(
        *TURN_ROW_FIELDS,
        run_key=run_key,
        plan_json=Cast("plan", TextField()),
        completed_json=Cast("completed_phases", TextField()),
        **{f"effective_{f}": F(f"effective__{f}") for f in STATE_ROW_FIELDS},
    )
    return rows


def turn_rows(*, scope: RunScope = EVERY_RUN, run_id: str | None = None) -> QuerySet[Turn, Mapping[str, Any]]:
    """Turns as plain rows (dicts, the run's id joined in) for list pages: building 50 model instances
    (and 50 runs) per page would cost more than the page's query (benchmarks/bench_reads.py). Only runs in
    ``scope``; a run's turns are tested against it by the run's id, without a join."""
    if run_id is None:
        return _turn_rows_base(F("run__run_id")).filter(scope.q("run__run_id"))
    if not _usable_key(run_id) or not scope.allows(run_id):
        return Turn.objects.none().values()  # an id no column can hold (a NUL) names no run
    else:
        # By the run's key, looked up in a subquery: the planner then knows it is one run and walks the
        # (run, -updated_at, -id) index for the page, where a join would sort every turn of the run. The
        # run's key is the one asked for: no join for it either.
        return _turn_rows_base(Value(run_id, output_field=CharField())).filter(
            run_id=Subquery(Run.objects.filter(run_id=run_id).order_by().values("pk")[:1])
        )


_EXACT_LOOKUPS = {"decision": "decision", "status": "status", "state": "effective__state"}


def turn_page_rows(*, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: dict[str, str]) -> Any:
    """A turn list's rows (``turn_rows``), filtered by exact values (a valid decision, a status, a state: the
    list's fast path, journals.views.TurnListView), for CursorPagination."""
    return turn_rows(scope=scope, run_id=run_id).filter(**{_EXACT_LOOKUPS[k]: v for k, v in exact.items()})


_TIMELINE = (
    # The committing record's place, not its bytes: a timeline never shows raw lines.
    Prefetch("phases", queryset=Phase.objects.select_related("record").defer("record__line").order_by("position")),
    # By position alone: the model's ordering would join the turn and its run only to sort by them.
    Prefetch("intents", queryset=Intent.objects.order_by("position", "id")),
)


def turn_detail(*, run_id: str, turn_id: str) -> dict[str, Any] | None:
    """The API's answer for one turn (journals.serializers.TurnDetailSerializer's shape), or None: the turn
    and its run joined, its phases (with their committing records' places) and intents prefetched."""
    turn = turn_lookup(run_id=run_id, turn_id=turn_id, timeline=True)
    return None if turn is None else TurnDetailSerializer(turn).data


def turn_with_timeline(*, turn: Turn) -> Turn:
    """The turn with its run and effective state joined, its phases (and committing records) and intents
    prefetched: a fixed query count."""
    return Turn.objects.select_related("run", "effective").prefetch_related(*_TIMELINE).get(pk=turn.pk)


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


if on_postgresql():
    # PostgreSQL answers three reads with written statements of its own (journals/postgres.py, which says
    # why): the one question of the database the reads ask.
    from journals import postgres as _postgres

    api_token_find = _postgres.pg_api_token_find
    turn_page_rows = _postgres.pg_turn_page_rows
    turn_detail = _postgres.pg_turn_detail
