"""The one place that asks which database it is talking to.

The project runs on SQLite (a newcomer's machine, most tests) and on PostgreSQL (production). Reads and
writes go through the ORM, which speaks both. What only PostgreSQL has goes through here:

- ``on_postgresql``: the test itself, for the few callers that take a PostgreSQL-only path (the journal
  store's choice, journals/store.py);
- ``set_local``: a transaction-local setting (``set_config(..., true)``), which SQLite has no notion of;
- ``postgres_only``: a migration operation for triggers and functions, which only PostgreSQL gets;
- ``rows_update``: many rows' fields set to values of their own, one statement per table on PostgreSQL;
- ``rows_insert``: new rows whose ids nobody reads back, through COPY on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections, models

Step = str | Callable[[Any, Any], None] | None


def on_postgresql(connection: Any = None) -> bool:
    """Whether ``connection`` (a connection or a schema editor; the default connection when None) is
    PostgreSQL's."""
    if connection is None:
        connection = connections["default"]
    if not hasattr(connection, "vendor"):
        connection = connection.connection  # a schema editor holds its connection
    return bool(connection.vendor == "postgresql")


def set_local(name: str, value: str, *, using: str = "default") -> None:
    """Set a PostgreSQL setting for the current transaction only (gone at COMMIT or ROLLBACK). SQLite has
    no settings: nothing to do there."""
    connection = connections[using]
    if on_postgresql(connection):
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])


def postgres_only(forward: Step, reverse: Step = None) -> Any:
    """A migration operation run on PostgreSQL only, a no-op elsewhere. Each side is SQL (executed as one
    script) or a function ``(apps, schema_editor)``; None: nothing to do that way."""
    from django.db import migrations

    def step(action: Step) -> Callable[[Any, Any], None]:
        def run(apps: Any, schema_editor: Any) -> None:
            if action is None or not on_postgresql(schema_editor):
                return
            if isinstance(action, str):
                schema_editor.execute(action)
            else:
                action(apps, schema_editor)

        return run

    return migrations.RunPython(step(forward), step(reverse))


ROWS_UPDATE_CHUNK = 1000  # rows per statement: a batch's changed turns in one, a full fold's in a few


def rows_update(*, model: type[models.Model], rows: Sequence[models.Model], fields: Sequence[str]) -> int:
    """Write ``fields`` of each of ``rows`` (saved instances of ``model``) with its own values; returns how
    many rows were given.

    On PostgreSQL it is one ``UPDATE ... FROM (VALUES ...)`` per 1,000 rows. Django's ``bulk_update`` builds
    a ``CASE`` per row and field instead, and that building was most of the cost of an assessment's
    projections (benchmarks/bench_growth.py, docs/perf/2026-12-06-growth-bounded.md). Elsewhere (SQLite)
    it is one plain ``UPDATE`` per row."""
    if not rows:
        return 0
    connection = connections["default"]
    meta = model._meta
    pk = meta.pk
    if pk is None:
        raise ValueError(f"{model.__name__} has no primary key")
    columns: list[models.Field[Any, Any]] = []
    for name in fields:
        found = meta.get_field(name)
        if not isinstance(found, models.Field) or found.column is None:
            raise ValueError(f"{model.__name__}.{name} is not a column")
        columns.append(found)
    table = connection.ops.quote_name(meta.db_table)
    quoted = [connection.ops.quote_name(str(f.column)) for f in columns]
    pk_column = connection.ops.quote_name(str(pk.column))

    def values(row: models.Model) -> list[Any]:
        return [f.get_db_prep_save(getattr(row, f.attname), connection) for f in columns]

    with connection.cursor() as cursor:
        if not on_postgresql(connection):
            assigned = ", ".join(f"{c} = %s" for c in quoted)
            # Names are the model's own quoted columns, never input; the values go as parameters.
            sql = f"UPDATE {table} SET {assigned} WHERE {pk_column} = %s"  # noqa: S608
            cursor.executemany(sql, [[*values(row), pk.get_db_prep_save(row.pk, connection)] for row in rows])
            return len(rows)
        # Each value is cast to its column's type: a VALUES list has no column types of its own.
        casts = [f"%s::{pk.db_type(connection)}"] + [f"%s::{f.db_type(connection)}" for f in columns]
        one = "(" + ", ".join(casts) + ")"
        names = ", ".join(["id_", *(f"v{i}" for i in range(len(columns)))])
        sets = ", ".join(f"{c} = v.v{i}" for i, c in enumerate(quoted))
        for start in range(0, len(rows), ROWS_UPDATE_CHUNK):
            chunk = rows[start : start + ROWS_UPDATE_CHUNK]
            params: list[Any] = []
            for row in chunk:
                params.append(pk.get_db_prep_save(row.pk, connection))
                params.extend(values(row))
            listed = ", ".join([one] * len(chunk))
            sql = f"UPDATE {table} SET {sets} FROM (VALUES {listed}) AS v({names}) WHERE {table}.{pk_column} = v.id_"  # noqa: S608
            cursor.execute(sql, params)
    return len(rows)


_COPIED_AS_HELD = frozenset(
    {
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "ForeignKey",
        "IntegerField",
        "PositiveIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)


def rows_insert(*, model: type[models.Model], rows: Sequence[models.Model]) -> int:
    """Insert ``rows`` (unsaved instances of ``model``; their ids are not set); returns how many.

    On PostgreSQL it is one ``COPY ... FROM STDIN``, each value adapted by psycopg's own (compiled) dumpers.
    ``bulk_create`` sends the rows as arrays bound on the client, and escaping each array's text was most
    of the client's cost of an assessment's inserts after its queries (benchmarks/bench_growth.py,
    docs/perf/2026-12-06-growth-flat.md). Elsewhere (SQLite) it is ``bulk_create``."""
    if not rows:
        return 0
    connection = connections["default"]
    if not on_postgresql(connection):
        model._default_manager.bulk_create(rows, batch_size=2000)
        return len(rows)
    meta = model._meta
    # The columns bulk_create would write for a new row: every concrete field but the generated id.
    fields = [
        f
        for f in meta.concrete_fields
        if f.column is not None and not isinstance(f, models.AutoField) and not getattr(f, "generated", False)
    ]
    table = connection.ops.quote_name(meta.db_table)
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    # A plain column's value goes as the instance holds it (psycopg adapts it, and the server parses COPY's
    # text as the column's type); the others (JSON, times, defaults computed on save) through the field.
    plain = [f.get_internal_type() in _COPIED_AS_HELD for f in fields]
    attnames = [f.attname for f in fields]
    statement = f"COPY {table} ({columns}) FROM STDIN"  # the model's own quoted columns; values go as data
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(
                [
                    getattr(row, name) if held else f.get_db_prep_save(f.pre_save(row, True), connection)
                    for f, name, held in zip(fields, attnames, plain, strict=True)
                ]
            )
    return len(rows)
