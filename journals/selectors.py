"""Reads of the journal store. Every projection of record content goes through `record_public`, which
applies the contract's section 8 (secret fields redacted) before anything leaves the store."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import psycopg
from django.db import connection
from django.db.models import CharField, F, Prefetch, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Cast

from engine.canonical import parse_line
from engine.secrets import redact
from journals.access import EVERY_RUN, RunScope
from journals.models import (
    STATE_ROW_FIELDS,
    TURN_ASSESSED_FIELDS,
    ApiToken,
    Branch,
    Intent,
    JournalRecord,
    Phase,
    Run,
    Turn,
)
from journals.serializers import TurnDetailSerializer, iso, state_row
from journals.storable import is_storable, storable

# psycopg's own loader for timestamptz (its C one where psycopg-binary is installed). Django registers a
# pure-Python subclass of psycopg's Python loader that only relabels each value with the connection's zone,
# which is the session's TimeZone (Django sets it on connecting), so both give the very same datetimes; a
# page reads two times a row, and psycopg's loader spares the pure-Python relabelling of each.
_TIMESTAMPTZ_OID = psycopg.postgres.types["timestamptz"].oid
_TIMESTAMPTZ_LOADER = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT)


@contextmanager
def _read_cursor() -> Iterator[Any]:
    """A cursor (Django's: its queries logged and counted as any) for the written statements on PostgreSQL
    below, with psycopg's timestamptz loader."""
    with connection.cursor() as cursor:
        cursor.cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _TIMESTAMPTZ_LOADER)
        yield cursor


_TOKEN_FIELDS = tuple(f.attname for f in ApiToken._meta.concrete_fields)
_TOKEN_SQL = (
    f"SELECT {', '.join(f.column for f in ApiToken._meta.concrete_fields)} FROM {ApiToken._meta.db_table}"
    " WHERE token_hash = %s AND revoked_at IS NULL"
)


def api_token_find(*, raw: str) -> ApiToken | None:
    """The active token with this value (looked up by its hash), or None.

    Every API request asks, and a revocation must hold at once in every process, so it is asked of the
    database each time (no cache). On PostgreSQL as one written statement on the unique hash's index:
    building and compiling it through the ORM would cost more than the round trip itself. The values are
    the ORM's own (no converter applies to these columns there); tests/store/test_store.py compares the two.
    """
    if not raw:
        return None
    if connection.vendor != "postgresql":
        # token_hash is unique: no ordering needed (``first()`` would sort by the model's ordering).
        return ApiToken.objects.filter(token_hash=ApiToken.hash(raw), revoked_at__isnull=True).order_by().first()
    with _read_cursor() as cursor:
        cursor.execute(_TOKEN_SQL, [ApiToken.hash(raw)])
        row = cursor.fetchone()
    return None if row is None else ApiToken.from_db(connection.alias, _TOKEN_FIELDS, row)


def _usable_key(value: str) -> bool:
    # Ids from a URL may hold what no column can (a NUL on PostgreSQL): such an id names nothing.
    return 0 < len(value) <= 200 and is_storable(value)


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


_JSON_FIELDS = ("plan", "completed_phases")


def turns_list(*, scope: RunScope = EVERY_RUN) -> QuerySet[Turn]:
    return Turn.objects.select_related("run").filter(scope.q("run__run_id")).order_by("-updated_at", "-id")


# Columns of a list row. The two JSON columns come as their text and are parsed by orjson in
# TurnSerializer.row: Django's JSONField converter (json.loads per value) was a visible share of a page.
TURN_ROW_FIELDS = (
    *("id", "turn_id"),
    *(f for f in TURN_ASSESSED_FIELDS if f not in _JSON_FIELDS),
    *("created_at", "updated_at"),
)




def _turn_rows_base(run_key: F | Value) -> QuerySet[Turn]:
    return Turn.objects.order_by("-updated_at", "-id").values(
        *TURN_ROW_FIELDS,
        run_key=run_key,
        plan_json=Cast("plan", TextField()),
        completed_json=Cast("completed_phases", TextField()),
        **{f"effective_{f}": F(f"effective__{f}") for f in STATE_ROW_FIELDS},
    )


def turn_rows(*, scope: RunScope = EVERY_RUN, run_id: str | None = None) -> QuerySet[Turn]:
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


class TurnPageQuery:
    """A turn list's page on PostgreSQL as one written statement: the rows of ``turn_rows`` (same keys, same
    values), filtered by the scope's run prefixes (journals.access), a run and exact column values (a
    valid decision, a status: the list's fast path, journals.views.TurnListView), and what CursorPagination
    does to a queryset: order by its ordering or the reverse, keep the rows past the cursor's position, slice.

    Building and compiling the ORM's statement would cost more than PostgreSQL takes to plan and run it.
    tests/api/test_projection.py pages through both, forwards and back, and compares every answer.
    """

    _ORDERINGS = {("-updated_at", "-id"): "DESC", ("updated_at", "id"): "ASC"}
    _POSITIONS = {"updated_at__lt": "<", "updated_at__gt": ">"}

    def __init__(self, *, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: dict[str, str]) -> None:
        self._run_id = run_id
        self._direction = "DESC"
        where, params = [], []
        if run_id is not None:
            # The run's key in a subquery, as turn_rows: the (run, -updated_at, -id) index walk.
            where.append("t.run_id = (SELECT id FROM journals_run WHERE run_id = %s LIMIT 1)")
            params.append(run_id)
            if not scope.allows(run_id):
                where.append("FALSE")  # the scope is a test of this very run id
        elif scope.prefixes is not None:
            # As the ORM's startswith, one LIKE per prefix; no prefix at all: no row.
            likes = ["r.run_id LIKE %s"] * len(scope.prefixes)
            where.append(f"({' OR '.join(likes)})" if likes else "FALSE")
            params.extend(connection.ops.prep_for_like_query(p) + "%" for p in scope.prefixes)
        for name, value in exact.items():
            if name not in _EXACT_COLUMNS:
                raise ValueError(f"not an exact filter of the turn list: {name}")
            where.append(f"{_EXACT_COLUMNS[name]} = %s")
            params.append(value)
        self._where, self._params = where, params

    def _copy(self) -> TurnPageQuery:
        other = copy.copy(self)
        other._where, other._params = list(self._where), list(self._params)
        return other

    def order_by(self, *fields: str) -> TurnPageQuery:
        other = self._copy()
        other._direction = self._ORDERINGS[fields]  # only the list's ordering and its reverse
        return other

    def filter(self, **position: str) -> TurnPageQuery:
        ((lookup, value),) = position.items()
        other = self._copy()
        other._where.append(f"t.updated_at {self._POSITIONS[lookup]} %s")
        # The cursor's position converted as the ORM converts it (tolerated formats, a naive time's zone).
        other._params.append(_UPDATED_AT.get_prep_value(value))
        return other

    def __getitem__(self, page: slice) -> list[dict[str, Any]]:
        offset, stop = page.start or 0, page.stop
        if stop is None or page.step is not None:
            raise ValueError("a page is a bounded slice")
        if self._run_id is not None and not _usable_key(self._run_id):
            return []  # an id no column can hold (a NUL) names no run
        # A run's list names its run from the URL (no join); the others join the run for its id.
        run_key, join = ("", "") if self._run_id is not None else (", r.run_id", _RUN_JOIN)
        direction = self._direction
        sql = (
            f"SELECT {_TURN_ROW_COLUMNS}, t.plan::text, t.completed_phases::text, {_STATE_COLUMNS}{run_key}"
            f" FROM journals_turn t{join}{_STATE_JOIN}"
            f"{' WHERE ' + ' AND '.join(self._where) if self._where else ''}"
            f" ORDER BY t.updated_at {direction}, t.id {direction} LIMIT %s OFFSET %s"
        )
        with _read_cursor() as cursor:
            cursor.execute(sql, [*self._params, stop - offset, offset])
            rows = cursor.fetchall()
        if self._run_id is None:
            return [dict(zip(_PAGE_COLUMNS, row, strict=True)) for row in rows]
        return [dict(zip(_PAGE_COLUMNS, (*row, self._run_id), strict=True)) for row in rows]


_UPDATED_AT = Turn._meta.get_field("updated_at")
_EXACT_COLUMNS = {"decision": "t.decision", "status": "t.status", "state": "e.state"}
_EXACT_LOOKUPS = {"decision": "decision", "status": "status", "state": "effective__state"}
_RUN_JOIN = " JOIN journals_run r ON r.id = t.run_id"
_STATE_JOIN = " LEFT JOIN journals_turneffective e ON e.turn_id = t.id"
_STATE_COLUMNS = ", ".join(f"e.{f}" for f in STATE_ROW_FIELDS)
_PAGE_COLUMNS = (
    *TURN_ROW_FIELDS, "plan_json", "completed_json", *(f"effective_{f}" for f in STATE_ROW_FIELDS), "run_key"
)
_TURN_ROW_COLUMNS = ", ".join(f"t.{Turn._meta.get_field(f).column}" for f in TURN_ROW_FIELDS)


def turn_page_rows(*, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: dict[str, str]) -> Any:
    """A turn list's rows (``turn_rows``), filtered by exact values, for CursorPagination: on PostgreSQL a
    TurnPageQuery, elsewhere the queryset."""
    if connection.vendor == "postgresql":
        return TurnPageQuery(scope=scope, run_id=run_id, exact=exact)
    return turn_rows(scope=scope, run_id=run_id).filter(**{_EXACT_LOOKUPS[k]: v for k, v in exact.items()})


_TIMELINE = (
    # The committing record's place, not its bytes: a timeline never shows raw lines.
    Prefetch("phases", queryset=Phase.objects.select_related("record").defer("record__line").order_by("position")),
    # By position alone: the model's ordering would join the turn and its run only to sort by them.
    Prefetch("intents", queryset=Intent.objects.order_by("position", "id")),
)


_TURN_DETAIL_SQL = """
SELECT t.turn_id, t.lineage, t.branch, t.plan::text, t.status, t.decision, t.reason, t.resume_from,
    t.completed_phases::text, t.created_at, t.updated_at, r.run_id, {state},
    (SELECT coalesce(json_agg(json_build_object('position', p.position, 'name', p.name, 'committed', p.committed,
            'committed_at', p.committed_at, 'record', CASE WHEN p.record_id IS NULL THEN NULL
            ELSE json_build_object('seq', jr.seq, 'branch', jr.branch, 'lsn', jr.lsn) END) ORDER BY p.position), '[]')
        FROM journals_phase p LEFT JOIN journals_journalrecord jr ON jr.id = p.record_id WHERE p.turn_id = t.id)::text,
    (SELECT coalesce(json_agg(json_build_object('intent', i.intent_id, 'effect_class', i.effect_class,
            'idempotency_key', i.idempotency_key, 'resolution', i.resolution, 'branch', i.branch, 'live', i.live,
            'dispatches', i.dispatches, 'outcome', i.outcome) ORDER BY i.position, i.id), '[]')
        FROM journals_intent i WHERE i.turn_id = t.id)::text
FROM journals_turn t JOIN journals_run r ON r.id = t.run_id LEFT JOIN journals_turneffective e ON e.turn_id = t.id
WHERE r.run_id = %s AND t.turn_id = %s
""".replace("{state}", ", ".join(f"e.{f}" for f in STATE_ROW_FIELDS))


def turn_detail(*, run_id: str, turn_id: str) -> dict[str, Any] | None:
    """The API's answer for one turn (journals.serializers.TurnDetailSerializer's shape), or None.

    On PostgreSQL it is one query: the phases (with their committing records' places) and the intents are
    aggregated as JSON by the database, where the ORM path costs three queries and ~30 model instances
    (benchmarks/bench_reads.py). tests/api/test_projection.py checks both paths give the same answer.
    """
    if not (_usable_key(run_id) and _usable_key(turn_id)):
        return None
    if connection.vendor != "postgresql":
        turn = turn_lookup(run_id=run_id, turn_id=turn_id, timeline=True)
        return None if turn is None else TurnDetailSerializer(turn).data
    with _read_cursor() as cursor:
        cursor.execute(_TURN_DETAIL_SQL, [run_id, turn_id])
        row = cursor.fetchone()
    if row is None:
        return None
    (turn_key, lineage, branch, plan, status, decision, reason, resume_from, completed, created, updated, run_key,
     *state, phases, intents) = row  # fmt: skip
    return {
        "run": run_key,
        "turn": turn_key,
        "lineage": lineage,
        "branch": branch,
        "plan": orjson.loads(plan),
        "status": status,
        "decision": decision,
        "reason": reason,
        "resume_from": resume_from,
        "completed_phases": orjson.loads(completed),
        "state": state_row(dict(zip(STATE_ROW_FIELDS, state, strict=True)), prefix=""),
        "created_at": iso(created),
        "updated_at": iso(updated),
        "phases": orjson.loads(phases),
        "intents": orjson.loads(intents),
    }


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
