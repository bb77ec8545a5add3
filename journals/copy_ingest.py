"""PostgreSQL's own ingest path: a batch's rows through COPY, its projection in one statement.

Everything else reads and writes through the ORM, on SQLite and PostgreSQL alike. This module exists for one
speed target: ingest through the API at no less than 0.45 of raw COPY's records/s (benchmarks/bench_ingest.py,
``python -m benchmarks ingest``; the floor is a raw psycopg COPY of the same rows, one per batch, measured in
the same run). The figures that justify it, beside the ORM path's, are in docs/perf/2026-12-02-dialect.md.

``records_copy_ingest`` is its one entry (journals.services.records_ingest calls it on PostgreSQL). It takes
the common batch: every line canonical and well-formed, every record new (above its branch's highest stored
lsn, once in the batch) on a branch with no gap. Such a batch stores all its records and nothing else,
exactly as the general path (journals.services) would; tests/store/test_streamed_ingest.py plays each case
both ways and compares answers and rows. Anything else is handed back (None), nothing of it kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import orjson
import psycopg
from django.db import connection, transaction
from django.utils import timezone
from psycopg.copy import LibpqWriter

from engine import proven_canonical
from journals import services
from journals.models import Branch, JournalRecord, Run, Turn
from journals.services import (
    _MAX_LSN,
    IngestError,
    IngestResult,
    _assessment_raised,
    _assessment_statement,
    _batch_turns,
    _check_expect,
    _check_fenced,
    _check_fencing_required,
    _fencing_current,
    _finish_checkpoints,
    _PlannedTurn,
    _prepare_rows,
    _Prepared,
    _project,
)

_T = TypeVar("_T")


def records_copy_ingest(
    *, run_id: str, lines: list[bytes], fencing: Mapping[str, int], expect: Mapping[int, int]
) -> IngestResult | None:
    """Store the batch ``lines`` (split, not parsed) of ``run_id`` through COPY when it is the common batch;
    None when it is not (rolled back, nothing kept: the general path decides). Raises IngestError as the
    general path would for what it checks under the run's lock (``expect``, ``fencing``)."""
    try:
        return _ingest_streamed(run_id, lines, fencing, expect)
    except _NotStreamable:
        return None


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
    """The run, locked for the batch, and its branches' cursors (journals.services._lock_run's answer). An
    existing run and its branches come back in one round trip (every batch but the first): under load,
    round trips are most of a batch's time. A run's first batch creates it as the general path does."""
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_RUN_SQL, [run_id, run_id])
        row = cursor.fetchone()
        cursor.cursor.nextset()
        cursors = cursor.fetchone()
    if row is None or cursors is None:
        return services._lock_run(run_id)
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
    being parsed before the transaction begins (about a sixth of a batch's time, measured in
    benchmarks/bench_ingest.py, now overlapped with the server's work).

    Anything else (a line refused, a duplicate, a conflict, a gap to fill) stops the streaming at that
    chunk: the COPY is ended cleanly (no error in the server's log), the transaction rolled back, and
    ``_NotStreamable`` raised; the general path then handles the batch from scratch, with the answer and
    the error (the first by line number, conflicts after malformed lines) it always gives."""
    with transaction.atomic():
        run, branches = _lock_run(run_id)
        _check_expect(branches, expect)
        new: list[_Prepared] = []
        now = timezone.now()
        stream = _Stream(run, branches, lines, run_id, new, now)

        def project() -> dict[str, Any] | None:
            # The whole batch proven canonical once its rows are sent (the engine's one serialisation,
            # docs/engine.md): while they stream the client sets the pace, afterwards the server does.
            if stream.streamable and not proven_canonical(stream.objs, lines):
                stream.streamable = False
            if not stream.streamable:
                return None
            projected = _project(run, branches, new, {}, now)
            return _projection_params(run, projected.touched, projected.turns)

        params = _copy_rows(stream.chunks(), project)
        if params is None:
            raise _NotStreamable  # leaves the atomic block: the rows written so far are rolled back
        # The batch's turns are known once its lines are parsed (every record here is new); a refusal
        # rolls the rows back.
        current = _fencing_current(run, _batch_turns(new), fencing)
        _check_fenced(current, fencing)
        _check_fencing_required(current, _batch_turns(new), fencing)
        # The pending-assessment flag's upsert rides in the projection's statement (one round trip less
        # per batch); the batch that raises it publishes `assess_run` on commit (recovery/background.py).
        _assessment_raised(run, _write_projection_pg(params))
        _finish_checkpoints(run, new)
    return IngestResult(
        run=run,
        stored=len(new),
        duplicates=0,
        first_seq=run.last_seq - len(new) + 1,
        last_seq=run.last_seq,
        branches=sorted(branches.values(), key=lambda b: b.number),
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
        new: list[_Prepared],
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
            number: branch.last_lsn if branch.last_lsn == branch.committed_lsn else _MAX_LSN
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
                prepared = _prepare_rows(objs, [None] * len(chunk), chunk, self.run_id, start + 1)
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
# 1,000 records was written only after its last chunk had arrived, none of it while the client built the
# rest (an in-process A/B on the same database, batches alternated: 7 to 12% less time a batch).
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
    time, most of the client's COPY cost (about a third of the CPU a batch takes in Python). Columns and
    types as ``_COLUMNS``: bigint, bigint, integer, bigint, varchar, integer, varchar, varchar, bytea (in
    its hex form, its backslash escaped), timestamptz (ISO 8601 with its offset). Same rows, same bytes in
    the table (tests/store: every column read back, escapes included)."""

    def __init__(self, now: datetime) -> None:
        self.received = b"\t" + now.isoformat().encode() + b"\n"
        self.texts: dict[str | None, bytes] = {}

    def build(self, run_pk: int, first_seq: int, recs: list[_Prepared]) -> bytes:
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


def _projection_params(run: Run, branches: list[Branch], turns: list[_PlannedTurn]) -> dict[str, Any]:
    """The parameters of ``_write_projection_pg`` (no query: built while the rows are written)."""
    flag_sql, flag_params = _assessment_statement(run)
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
    """The same writes as journals.services._write_projection, and the pending-assessment flag's upsert, in
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
                prefix_digest = %(digest)s, updated_at = %(updated)s
            WHERE id = %(run)s
            RETURNING (SELECT count(*) FROM flag)
            """,
            params,
        )
        row = cursor.fetchone()
    return bool(row and row[0])
