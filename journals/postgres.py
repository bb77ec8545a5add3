"""The journal store on PostgreSQL (journals/store.py): ingest through COPY, and three reads as written
statements.

Everything else the store does goes through the ORM, on SQLite and PostgreSQL alike, or through
kernel/dialect.py's many-row writes and reads by key, which every domain shares; this is the store's one
module with SQL of PostgreSQL's own, for two speed targets measured in the same run as their floors (the
figures that justify each, beside the ORM's, are in docs/perf/2026-12-02-dialect.md):

- ingest through the API at no less than 0.45 of raw COPY's records/s (benchmarks/bench_ingest.py,
  ``python -m benchmarks ingest``; the floor is a raw psycopg COPY of the same rows, one per batch);
- API reads within 2x a plain Django view at p95 (benchmarks/bench_reads.py, ``python -m benchmarks
  reads``): through the ORM the token's lookup, a turn list's page and a turn's detail cost 2.5 to 5 times
  these statements in Python, most of a read.

Ingest: ``PostgresStore.records_ingest`` takes the common batch through COPY: every line canonical and
well-formed, every record new (above its branch's highest stored lsn, once in the batch) on a branch with no
gap. Such a batch stores all its records and nothing else, exactly as the general path (journals/orm.py)
would; tests/store/test_streamed_ingest.py plays each case both ways and compares answers and rows.
Anything else is rolled back, nothing of it kept, and handed to the general path the store was built with.
The steps both paths share (parsing, fencing, the door check, the projection) are journals/intake.py's.

Reads: ``api_token_find``, ``turn_page_rows`` (a ``TurnPageStatement``) and ``turn_detail`` answer as the
ORM store's methods of the same names do.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar, cast

import orjson
import psycopg
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone
from psycopg.copy import LibpqWriter

from engine import proven_canonical
from journals.access import EVERY_RUN, RunScope
from journals.assessment_flag import assessment_request_statement, assessment_requested
from journals.intake import (
    MAX_LSN,
    IngestError,
    IngestResult,
    IngestWalk,
    PlannedTurn,
    Prepared,
    batch_turns,
    check_expect,
    check_fenced,
    check_fencing_required,
    door_check,
    fencing_current,
    finish_checkpoints,
    prepare_rows,
    project,
    run_lock,
)
from journals.models import STATE_ROW_FIELDS, TURN_ROW_FIELDS, ApiToken, Branch, JournalRecord, Run, Turn
from journals.serializers import iso, state_row
from journals.storable import usable_key

_T = TypeVar("_T")


class PostgresStore:
    """The journal store on PostgreSQL (journals/store.py): COPY for the common batch, ``general`` (the ORM's
    ingest, handed in by journals.store) for every other batch, and the three hot reads as written
    statements."""

    def __init__(self, *, general: IngestWalk) -> None:
        self.general = general

    def records_ingest(
        self, *, run_id: str, lines: list[bytes], fencing: Mapping[str, int], expect: Mapping[int, int]
    ) -> IngestResult:
        """Store the batch ``lines`` (split, not parsed) of ``run_id`` through COPY when it is the common
        batch, else through the general path. Raises IngestError as the general path would for what it
        checks under the run's lock (``expect``, ``fencing``)."""
        try:
            return _ingest_streamed(run_id, lines, fencing, expect)
        except _NotStreamable:
            # Rolled back, nothing of it kept: the general path decides, as for any batch.
            return self.general(run_id=run_id, lines=lines, fencing=fencing, expect=expect)

    def api_token_find(self, *, raw: str) -> ApiToken | None:
        return _api_token_find(raw)

    def turn_page_rows(
        self, *, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: Mapping[str, str]
    ) -> TurnPageStatement:
        return TurnPageStatement(scope=scope, run_id=run_id, exact=exact)

    def turn_detail(self, *, run_id: str, turn_id: str) -> dict[str, Any] | None:
        return _turn_detail(run_id, turn_id)


class _NotStreamable(Exception):
    """The streamed path met a batch that only the general path handles (``_ingest_streamed``)."""


_RUN_FIELDS = tuple(f.attname for f in Run._meta.concrete_fields)
# The run locked, then its branches' cursors as one JSON array: one round trip (two statements in one
# simple query), and SQL the ORM would otherwise compile anew for every batch (a visible share of a batch's
# CPU). Two statements, not a subquery of the locking one: in READ COMMITTED a statement that waited for
# the lock re-reads the locked row but not what its subqueries read, which would be the cursors from
# before the batch that held the lock (a concurrent batch at the same place then hit the unique index,
# a 500, instead of answering `lsn_conflict` or `fenced`). The second statement's snapshot is taken after
# the lock is held.
_LOCK_RUN_SQL = (
    f"SELECT {', '.join('r.' + name for name in _RUN_FIELDS)}"
    " FROM journals_run r WHERE r.run_id = %s FOR UPDATE OF r;"
    " SELECT coalesce(json_agg(json_build_array(b.id, b.number, b.last_lsn, b.committed_lsn, b.record_count)),"
    " '[]'::json)::text FROM journals_branch b JOIN journals_run r ON r.id = b.run_id WHERE r.run_id = %s"
)


def _lock_run(run_id: str) -> tuple[Run, dict[int, Branch]]:
    """The run, locked for the batch, and its branches' cursors (journals.intake.run_lock's answer). An
    existing run and its branches come back in one round trip (every batch but the first): under load,
    round trips are most of a batch's time. A run's first batch creates it as the general path does."""
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_RUN_SQL, [run_id, run_id])
        row = cursor.fetchone()
        cursor.cursor.nextset()
        cursors = cursor.fetchone()
    if row is None or cursors is None:
        return run_lock(run_id)
    run = Run.from_db(connection.alias, _RUN_FIELDS, row)
    branches = {}
    for pk, number, last_lsn, committed_lsn, count in orjson.loads(cursors[0]):
        branch = Branch(
            id=pk, run=run, number=number, last_lsn=last_lsn, committed_lsn=committed_lsn, record_count=count
        )
        branch._state.adding = False
        branches[number] = branch
    return run, branches


def _ingest_streamed(
    run_id: str, lines: list[bytes], fencing: Mapping[str, int], expect: Mapping[int, int]
) -> IngestResult:
    """The path for the common batch: every line canonical and well-formed, every record new (above
    its branch's highest stored lsn, once in the batch) on a branch with no gap. Such a batch stores all
    its records and nothing else, exactly as the general path would; here each chunk of lines is parsed,
    checked and built into COPY rows while the server writes the previous chunk, instead of the whole batch
    being parsed before the transaction begins: the client's parsing overlaps with the server's writing.

    Anything else (a line refused, a duplicate, a conflict, a gap to fill) stops the streaming at that
    chunk: the COPY is ended cleanly (no error in the server's log), the transaction rolled back, and
    ``_NotStreamable`` raised; the general path then handles the batch from scratch, with the answer and
    the error (the first by line number, conflicts after malformed lines) it always gives."""
    with transaction.atomic():
        run, branches = _lock_run(run_id)
        if fencing:  # fencing first: a stale owner is told so before anything else
            check_fenced(fencing_current(run, set(), fencing), fencing)
        check_expect(branches, expect)
        # Where the branches stood before the batch, for the door check once the rows are sent.
        before = {number: copy.copy(branch) for number, branch in branches.items()}
        stored_through = run.last_seq
        new: list[Prepared] = []
        now = timezone.now()
        stream = _Stream(run, branches, lines, run_id, new, now)

        def projection() -> dict[str, Any] | None:
            # The whole batch proven canonical once its rows are sent (the engine's one serialisation,
            # docs/engine.md): while they stream the client sets the pace, afterwards the server does.
            if stream.streamable and not proven_canonical(stream.objs, lines):
                stream.streamable = False
            if not stream.streamable:
                return None
            projected = project(run, branches, new, {}, now)
            return _projection_params(run, projected.touched, projected.turns)

        params = _copy_rows(stream.chunks(), projection)
        if params is None:
            raise _NotStreamable  # leaves the atomic block: the rows written so far are rolled back
        # The batch's turns are known once its lines are parsed (every record here is new); a refusal
        # rolls the rows back.
        current = fencing_current(run, batch_turns(new), fencing)
        check_fenced(current, fencing)
        check_fencing_required(current, batch_turns(new), fencing)
        violations = door_check(run, before, new, expect, stored_through)
        # The pending-assessment flag's upsert rides in the projection's statement (one round trip less
        # per batch); the batch that raises it announces `prefix_moved` on commit (journals/assessment_flag.py).
        assessment_requested(run=run, raised=_write_projection_pg(params))
        finish_checkpoints(run, new)
    return IngestResult(
        run=run,
        stored=len(new),
        duplicates=0,
        first_seq=run.last_seq - len(new) + 1,
        last_seq=run.last_seq,
        branches=sorted(branches.values(), key=lambda b: b.number),
        violations=violations,
    )


class _Stream:
    """The streamed path's COPY data (``_ingest_streamed``): ``chunks`` parses, checks and builds the rows of
    ``_COPY_CHUNK_ROWS`` lines at a time, appending the records to ``new``; at the first line the streamed
    path does not take, it sets ``streamable`` to False and ends the data (the rows already sent are rolled
    back with the transaction). Whether every line is canonical is proven after the last chunk (a line
    that is not makes the batch the general path's too, its rows sent and then rolled back)."""

    def __init__(
        self,
        run: Run,
        branches: dict[int, Branch],
        lines: list[bytes],
        run_id: str,
        new: list[Prepared],
        now: datetime,
    ) -> None:
        self.run_pk = run.pk
        self.first_seq = run.last_seq + 1
        self.lines = lines
        self.run_id = run_id
        self.new = new
        self.rows = _CopyRows(now)
        self.streamable = True
        self.objs: list[dict[str, Any]] = []  # every line's object, for the canonical proof at the end
        # A record streams only above this lsn of its branch: the highest stored (-1 for a new branch, which
        # has none), or every lsn for a branch with a gap (records stored beyond its cursor, which the
        # general path reads to move the cursor).
        self.floors = {
            number: branch.last_lsn if branch.last_lsn == branch.committed_lsn else MAX_LSN
            for number, branch in branches.items()
        }

    def chunks(self) -> Iterator[bytes]:
        seen: set[tuple[int, int]] = set()
        floors, lines, new = self.floors, self.lines, self.new
        for start in range(0, len(lines), _COPY_CHUNK_ROWS):
            chunk = lines[start : start + _COPY_CHUNK_ROWS]
            try:
                objs = list(map(orjson.loads, chunk))
            except orjson.JSONDecodeError:
                self.streamable = False
                break
            if not all(type(obj) is dict for obj in objs):
                self.streamable = False
                break
            self.objs.extend(objs)
            try:
                prepared = prepare_rows(objs, [None] * len(chunk), chunk, self.run_id, start + 1)
            except IngestError:
                self.streamable = False
                break
            for rec in prepared:
                point = (rec.branch, rec.lsn)
                if rec.lsn <= floors.get(rec.branch, -1) or point in seen:
                    self.streamable = False
                    break
                seen.add(point)
            if not self.streamable:
                break
            new.extend(prepared)
            yield self.rows.build(self.run_pk, self.first_seq + start, prepared)


_COLUMNS = ("run_id", "seq", "branch", "lsn", "kind", "v", "turn", "digest", "line", "received_at")
# COPY's text format (PostgreSQL docs, "COPY", Text Format), not its binary one: a row is its fields
# separated by tabs and ended by a newline, NULL is \N, and a backslash, tab, newline or carriage return
# inside a value is escaped with a backslash. The server parses text rows a little more slowly, but it
# writes them as they come: COPY FROM flushes its buffered rows into the table and its indexes once they
# hold 64 KB of input lines or 1,000 rows, and in the binary format no line is counted, so a batch of
# 1,000 records would be written only after its last chunk had arrived, none of it while the client built
# the rest.
_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str | None, cache: dict[str | None, bytes]) -> bytes:
    """A varchar field, escaped, in UTF-8 (or NULL's \\N); a batch repeats its kinds and turns, hence the cache."""
    field = cache.get(value)
    if field is None:
        field = rb"\N" if value is None else value.translate(_TEXT_ESCAPES).encode()
        cache[value] = field
    return field


# Rows per chunk of COPY data (about 60 KB of the benchmark's records, near the size at which the server
# flushes its rows): the server writes a chunk's rows while the next one is parsed, checked and built.
_COPY_CHUNK_ROWS = 100


class _CopyRows:
    """Rows in COPY's text format, built directly; each record's digest is computed here (``_digest``)
    when it is not known yet. psycopg's write_row adapts every value through its dumpers one call at a
    time, most of the client's COPY cost and a large part of a batch's CPU in Python. Columns and
    types as ``_COLUMNS``: bigint, bigint, integer, bigint, varchar, integer, varchar, varchar, bytea (in
    its hex form, its backslash escaped), timestamptz (ISO 8601 with its offset). Same rows, same bytes in
    the table (tests/store: every column read back, escapes included)."""

    def __init__(self, now: datetime) -> None:
        self.received = b"\t" + now.isoformat().encode() + b"\n"
        self.texts: dict[str | None, bytes] = {}

    def build(self, run_pk: int, first_seq: int, recs: list[Prepared]) -> bytes:
        """The rows of ``recs``, the first with seq ``first_seq``."""
        received, texts, sha256 = self.received, self.texts, hashlib.sha256
        run = b"%d\t" % run_pk
        out: list[bytes] = []
        extend = out.extend
        for seq, rec in enumerate(recs, start=first_seq):
            v = rec.v
            raw = rec.raw
            digest = rec.digest
            if digest is None:
                digest = rec.digest = sha256(raw).hexdigest()
            kind = texts.get(rec.kind) or _copy_text(rec.kind, texts)
            turn = texts.get(rec.turn) or _copy_text(rec.turn, texts)
            extend(
                (
                    run,
                    b"%d\t%d\t%d\t%b\t%b\t%b\t%b\t\\\\x"
                    % (seq, rec.branch, rec.lsn, kind, rb"\N" if v is None else b"%d" % v, turn, digest.encode()),
                    raw.hex().encode(),
                    received,
                )
            )
        return b"".join(out)


def _flushing_writer(cursor: psycopg.Cursor[Any]) -> LibpqWriter:
    """psycopg's COPY writer, flushing every block it is given (``flush_threshold=0``). psycopg releases
    before the one installed here take no threshold and, on Linux, flush at the end only: the same rows,
    less of their writing overlapped."""
    try:
        return LibpqWriter(cursor, flush_threshold=0)  # type: ignore[call-arg, unused-ignore]
    except TypeError:
        return LibpqWriter(cursor)


def _copy_rows(chunks: Iterable[bytes], meanwhile: Callable[[], _T]) -> _T:
    """COPY is several times faster than INSERT for a batch (benchmarks/bench_ingest.py). The rows (text
    format) come from the stream (``_Stream.chunks``). Each chunk is flushed to the server
    as soon as it is built (``flush_threshold=0``; psycopg would otherwise keep up to 1 MiB in libpq's
    buffer), so the server writes rows while the client builds the next chunk and then runs
    ``meanwhile``; the COPY's end and its result (an error included) are awaited after that."""
    table = JournalRecord._meta.db_table
    with connection.cursor() as cursor:
        raw_cursor = cursor.cursor  # the psycopg 3 cursor inside Django's wrapper, same transaction
        statement = f"COPY {table} ({', '.join(_COLUMNS)}) FROM STDIN"
        with raw_cursor.copy(statement, writer=_flushing_writer(raw_cursor)) as copy:
            for chunk in chunks:
                copy.write(chunk)
            return meanwhile()


def _projection_params(run: Run, branches: list[Branch], turns: list[PlannedTurn]) -> dict[str, Any]:
    """The parameters of ``_write_projection_pg`` (no query: built while the rows are written)."""
    flag_sql, flag_params = assessment_request_statement(run=run)
    return {
        "flag_sql": flag_sql,
        "run": run.pk,
        "now": timezone.now(),
        "turns": orjson.dumps([t._asdict() for t in turns]).decode(),
        "bn": [b.number for b in branches],
        "bl": [b.last_lsn for b in branches],
        "bc": [b.committed_lsn for b in branches],
        "bk": [b.record_count for b in branches],
        "count": run.record_count,
        "seq": run.last_seq,
        "digest": run.prefix_digest,
        "updated": run.updated_at,
        **flag_params,
    }


def _write_projection_pg(params: dict[str, Any]) -> bool:
    """The same writes as the ORM store's projection (journals/orm.py), and the pending-assessment flag's upsert, in
    one statement (data-modifying CTEs, a fixed number of parameters whatever the batch holds). The planned
    turns travel as one JSON document (one parameter, serialised by orjson: psycopg adapts a Python list
    element by element). Columns without a value here take the model's defaults, spelled out. The first
    planning of a turn wins (ON CONFLICT DO NOTHING). Returns whether the flag was raised by this batch.
    ``params`` from ``_projection_params``."""
    flag_sql = params.pop("flag_sql")
    connection.ensure_connection()
    # Server-side binding (a plain psycopg cursor on the same connection and transaction): the parameters
    # go to the server as such instead of being quoted into the SQL text client-side.
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            f"""
            WITH planned AS (
                INSERT INTO {Turn._meta.db_table} (run_id, turn_id, lineage, branch, plan, first_seq, status,
                    completed_phases, created_at, updated_at, assessed_digest, fencing_counter)
                SELECT %(run)s, u.turn_id, u.lineage, u.branch, u.plan, u.first_seq, 'open', '[]'::jsonb, %(now)s,
                    %(now)s, '', 0
                FROM jsonb_to_recordset(%(turns)s::jsonb)
                    AS u(turn_id text, lineage text, branch int, plan jsonb, first_seq bigint)
                ON CONFLICT (run_id, turn_id) DO NOTHING
            ), cursors AS (
                INSERT INTO {Branch._meta.db_table} (run_id, number, last_lsn, committed_lsn, record_count, live)
                SELECT %(run)s, n, l, c, k, false
                FROM unnest(%(bn)s::int[], %(bl)s::bigint[], %(bc)s::bigint[], %(bk)s::bigint[]) AS u(n, l, c, k)
                ON CONFLICT (run_id, number) DO UPDATE SET last_lsn = EXCLUDED.last_lsn,
                    committed_lsn = EXCLUDED.committed_lsn, record_count = EXCLUDED.record_count
            ), flag AS ({flag_sql})
            UPDATE {Run._meta.db_table} SET record_count = %(count)s, last_seq = %(seq)s,
                prefix_digest = %(digest)s, updated_at = %(updated)s,
                changed_at = GREATEST(changed_at, %(updated)s)
            WHERE id = %(run)s
            RETURNING (SELECT count(*) FROM flag)
            """,
            params,
        )
        row = cursor.fetchone()
    return bool(row and row[0])


# --- Reads ------------------------------------------------------------------------------------------

# psycopg's own loader for timestamptz (its C one where psycopg-binary is installed). Django registers a
# pure-Python subclass of psycopg's Python loader that only relabels each value with the connection's zone,
# which is the session's TimeZone (Django sets it on connecting), so both give the very same datetimes; a
# page reads two times a row, and psycopg's loader spares the pure-Python relabelling of each.
_TIMESTAMPTZ_OID = psycopg.postgres.types["timestamptz"].oid
_TIMESTAMPTZ_LOADER = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT)


@contextmanager
def _read_cursor() -> Iterator[Any]:
    """A cursor (Django's: its queries logged and counted as any) for the written statements below, with
    psycopg's timestamptz loader."""
    with connection.cursor() as cursor:
        cursor.cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _TIMESTAMPTZ_LOADER)
        yield cursor


_TOKEN_FIELDS = tuple(f.attname for f in ApiToken._meta.concrete_fields)
_TOKEN_SQL = (
    # Every concrete field has a column; the stubs type Field.column as optional.
    f"SELECT {', '.join(f.column for f in ApiToken._meta.concrete_fields)} FROM {ApiToken._meta.db_table}"  # type: ignore[misc]
    " WHERE token_hash = %s AND revoked_at IS NULL"
)


def _api_token_find(raw: str) -> ApiToken | None:
    """The active token with this value (looked up by its hash), or None.

    Every API request asks, and a revocation must hold at once in every process, so it is asked of the
    database each time (no cache): one written statement on the unique hash's index, since building and
    compiling it through the ORM would cost more than the round trip itself. The values are the ORM's own
    (no converter applies to these columns); tests/store/test_store.py compares the two.
    """
    if not raw:
        return None
    with _read_cursor() as cursor:
        cursor.execute(_TOKEN_SQL, [ApiToken.hash(raw)])
        row = cursor.fetchone()
    return None if row is None else ApiToken.from_db(connection.alias, _TOKEN_FIELDS, row)


class TurnPageStatement:
    """A turn list's rows as one written statement: not a QuerySet, but the three things DRF's
    CursorPagination asks of one (journals.store.TurnRows): order by the list's ordering or its reverse, keep
    the rows past the cursor's position, slice a page. Any other ordering or filter is a KeyError. The rows
    are those of journals.orm.turn_rows (same keys, same values), filtered by the scope's run prefixes
    (journals.access), a run and exact column values (a valid decision, a status, a state: the list's fast
    path, journals.views.TurnListView).

    Building and compiling the ORM's statement would cost more than PostgreSQL takes to plan and run it.
    tests/api/test_projection.py pages through both, forwards and back, and compares every answer.
    """

    _ORDERINGS: dict[tuple[str, ...], str] = {("-updated_at", "-id"): "DESC", ("updated_at", "id"): "ASC"}
    _POSITIONS = {"updated_at__lt": "<", "updated_at__gt": ">"}

    def __init__(self, *, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: Mapping[str, str]) -> None:
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

    def _copy(self) -> TurnPageStatement:
        other = copy.copy(self)
        other._where, other._params = list(self._where), list(self._params)
        return other

    def order_by(self, *fields: str) -> TurnPageStatement:
        other = self._copy()
        other._direction = self._ORDERINGS[fields]  # only the list's ordering and its reverse
        return other

    def filter(self, **position: str) -> TurnPageStatement:
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
        if self._run_id is not None and not usable_key(self._run_id):
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
_RUN_JOIN = " JOIN journals_run r ON r.id = t.run_id"
_STATE_JOIN = " LEFT JOIN journals_turneffective e ON e.turn_id = t.id"
_STATE_COLUMNS = ", ".join(f"e.{f}" for f in STATE_ROW_FIELDS)
_PAGE_COLUMNS = (
    *TURN_ROW_FIELDS,
    "plan_json",
    "completed_json",
    *(f"effective_{f}" for f in STATE_ROW_FIELDS),
    "run_key",
)
# The row fields are the turn's own columns, never a reverse relation.
_TURN_ROW_COLUMNS = ", ".join(f"t.{cast('Field[Any, Any]', Turn._meta.get_field(f)).column}" for f in TURN_ROW_FIELDS)


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


def _turn_detail(run_id: str, turn_id: str) -> dict[str, Any] | None:
    """journals.selectors.turn_detail in one query: the phases (with their committing records' places) and
    the intents are aggregated as JSON by the database, where the ORM path costs three queries and ~30
    model instances. tests/api/test_projection.py checks both give the same answer."""
    if not (usable_key(run_id) and usable_key(turn_id)):
        return None
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
