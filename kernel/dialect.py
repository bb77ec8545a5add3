"""The one place that asks which database it is talking to.

The project runs on SQLite (a newcomer's machine, most tests) and on PostgreSQL (production). Reads and
writes go through the ORM, which speaks both. What only PostgreSQL has goes through here:

- ``on_postgresql``: the test itself, for the few callers that take a PostgreSQL-only path (the journal
  store's choice, journals/store.py);
- ``set_local``: a transaction-local setting (``set_config(..., true)``), which SQLite has no notion of;
- ``postgres_only``: a migration operation for triggers and functions, which only PostgreSQL gets;
- ``rows_update`` / ``values_update``: many rows' fields set to values of their own, one statement per
  table on PostgreSQL;
- ``rows_insert`` / ``values_insert``: new rows whose ids nobody reads back, through COPY on PostgreSQL
  (from model instances, or from plain tuples of values);
- ``values_read``: rows' values by key (a batch's turns' rows), a written statement bound on the server
  on PostgreSQL;
- ``fetched``: a query's rows streamed (a whole run's) or fetched at once (a batch's few).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import connections, models
from django.db.models import QuerySet

Step = str | Callable[[Any, Any], None] | None
T = TypeVar("T")


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


def fetched(queryset: QuerySet[Any, T], *, stream: bool, chunk_size: int = 5000) -> Iterable[T]:
    """The rows of ``queryset``: streamed ``chunk_size`` at a time when ``stream`` (a whole run's, so that memory
    stays flat), else fetched at once. On PostgreSQL streaming opens a server-side cursor (DECLARE, FETCH,
    CLOSE, and a plan made for the first rows): for a batch's hundred turns one plain fetch is cheaper."""
    if stream:
        return queryset.iterator(chunk_size=chunk_size)
    return queryset


def lz4_compressed(table: str, column: str) -> Any:
    """A migration operation that has PostgreSQL compress the bytea column with lz4: for values of megabytes
    rewritten often, lz4 writes about twice as fast as the default pglz for about a third more bytes on disk
    (docs/perf/2026-12-06-growth-flat.md). A server built without lz4 keeps pglz: same bytes read back."""
    forward = f"""
DO $$
BEGIN
    ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4;
EXCEPTION WHEN others THEN
    RAISE NOTICE USING MESSAGE = '{table}.{column} keeps the default compression: ' || SQLERRM;
END
$$;
"""
    return postgres_only(forward, f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION default")


ROWS_UPDATE_CHUNK = 1000  # rows per statement: a batch's changed turns in one, a full fold's in a few


def _columns(model: type[models.Model], fields: Sequence[str]) -> list[models.Field[Any, Any]]:
    meta = model._meta
    columns: list[models.Field[Any, Any]] = []
    for name in fields:
        found = meta.pk if name == "pk" else meta.get_field(name)
        if not isinstance(found, models.Field) or found.column is None:
            raise ValueError(f"{model.__name__}.{name} is not a column")
        columns.append(found)
    return columns


def rows_update(*, model: type[models.Model], rows: Sequence[models.Model], fields: Sequence[str]) -> int:
    """Write ``fields`` of each of ``rows`` (saved instances of ``model``) with its own values; returns how
    many rows were given (``values_update``)."""
    columns = _columns(model, fields)
    return values_update(
        model=model, fields=fields, rows=[(row.pk, [getattr(row, f.attname) for f in columns]) for row in rows]
    )


def values_update(
    *, model: type[models.Model], fields: Sequence[str], rows: Sequence[tuple[Any, Sequence[Any]]]
) -> int:
    """Write ``fields`` of each row named in ``rows``: (its pk, its values in the order of ``fields``, as the
    model's attributes hold them); returns how many rows were given.

    On PostgreSQL it is one ``UPDATE ... FROM unnest(<one array per column>)`` per 1,000 rows: a dozen
    parameters however many rows, so that neither the client nor the server parses a statement that grows
    with them. Django's ``bulk_update`` builds a ``CASE`` per row and field instead, and that building was
    most of the cost of an assessment's projections (benchmarks/bench_growth.py,
    docs/perf/2026-12-06-growth-bounded.md). Elsewhere (SQLite) it is one plain ``UPDATE`` per row."""
    if not rows:
        return 0
    connection = connections["default"]
    meta = model._meta
    pk = meta.pk
    if pk is None:
        raise ValueError(f"{model.__name__} has no primary key")
    columns = _columns(model, fields)
    table = connection.ops.quote_name(meta.db_table)
    quoted = [connection.ops.quote_name(str(f.column)) for f in columns]
    pk_column = connection.ops.quote_name(str(pk.column))
    if not on_postgresql(connection):
        assigned = ", ".join(f"{c} = %s" for c in quoted)
        # Names are the model's own quoted columns, never input; the values go as parameters.
        sql = f"UPDATE {table} SET {assigned} WHERE {pk_column} = %s"  # noqa: S608
        with connection.cursor() as cursor:
            cursor.executemany(
                sql,
                [
                    [*(f.get_db_prep_save(v, connection) for f, v in zip(columns, values, strict=True)), key]
                    for key, values in rows
                ],
            )
        return len(rows)
    # Each array is cast to its column's type: unnest's rows have no column types of their own.
    arrays = ", ".join([f"%b::{pk.db_type(connection)}[]", *(f"%b::{f.db_type(connection)}[]" for f in columns)])
    names = ", ".join(["id_", *(f"v{i}" for i in range(len(columns)))])
    sets = ", ".join(f"{c} = v.v{i}" for i, c in enumerate(quoted))
    sql = f"UPDATE {table} SET {sets} FROM unnest({arrays}) AS v({names}) WHERE {table}.{pk_column} = v.id_"  # noqa: S608
    _unnest_each(connection, sql, columns, [values for _, values in rows], keys=[key for key, _ in rows])
    return len(rows)


def _unnest_each(
    connection: Any,
    sql: str,
    columns: Sequence[models.Field[Any, Any]],
    rows: Sequence[Sequence[Any]],
    *,
    keys: Sequence[Any] | None = None,
) -> None:
    """Run ``sql`` (its parameters: one array of ``keys`` when given, then one array per column) for each
    1,000 of ``rows``. Server-side binding (a plain psycopg cursor on the same connection and transaction):
    the arrays go to the server as parameters instead of being quoted element by element into the SQL
    text, and the statement, the same text for a model's fields whatever the rows, is prepared once per
    connection (settings: prepare_threshold). The placeholders ask for psycopg's binary format (``%b``):
    its text format escapes every element of a text array with a regular expression, a third of the
    client's cost of these statements (benchmarks/bench_growth.py)."""
    import psycopg  # PostgreSQL's only

    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as raw:
        for start in range(0, len(rows), ROWS_UPDATE_CHUNK):
            chunk = rows[start : start + ROWS_UPDATE_CHUNK]
            params: list[list[Any]] = [] if keys is None else [list(keys[start : start + ROWS_UPDATE_CHUNK])]
            params.extend([_prepared(f, values[i], connection) for values in chunk] for i, f in enumerate(columns))
            raw.execute(sql, params)


def _prepared(field: models.Field[Any, Any], value: Any, connection: Any) -> Any:
    """``value`` as the field prepares it on save. What the field would only check goes as it is, at a cost
    comparable to sending it: text for a text column, an integer for an integer column, a boolean for a
    boolean one, None for any of these, a time that names its zone."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        held = _HELD_AS.get(field.get_internal_type())
        if held is kind or (value is None and held is not None):
            return value
    elif kind is datetime and value.tzinfo is not None and isinstance(field, models.DateTimeField):
        return value
    return field.get_db_prep_save(value, connection)


# The plain columns, and the Python type a value has when the field would send it unchanged (``_prepared``);
# a COPY takes a plain column's value as the instance holds it.
_HELD_AS: dict[str, type] = {
    "BigIntegerField": int,
    "BooleanField": bool,
    "CharField": str,
    "ForeignKey": int,
    "IntegerField": int,
    "PositiveIntegerField": int,
    "SmallIntegerField": int,
    "TextField": str,
}


def _inserted(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """The columns bulk_create would write for a new row: every concrete field but the generated id."""
    return [
        f
        for f in model._meta.concrete_fields
        if f.column is not None and not isinstance(f, models.AutoField) and not getattr(f, "generated", False)
    ]


def rows_insert(*, model: type[models.Model], rows: Sequence[models.Model], ignore_conflicts: bool = False) -> int:
    """Insert ``rows`` (unsaved instances of ``model``; their ids are not set); returns how many.

    On PostgreSQL it is ``values_insert``'s. Elsewhere (SQLite) it is ``bulk_create``. ``ignore_conflicts``:
    a row whose unique key is taken is left out, as ``bulk_create(ignore_conflicts=True)`` does."""
    if not rows:
        return 0
    connection = connections["default"]
    if not on_postgresql(connection):
        model._default_manager.bulk_create(rows, batch_size=2000, ignore_conflicts=ignore_conflicts)
        return len(rows)
    fields = _inserted(model)
    # A plain column's value goes as the instance holds it; the others (JSON, times, defaults computed on
    # save) as the field prepares them on save.
    plain = [f.get_internal_type() in _HELD_AS for f in fields]
    return values_insert(
        model=model,
        fields=[f.name for f in fields],
        rows=[
            [getattr(row, f.attname) if held else f.pre_save(row, True) for f, held in zip(fields, plain, strict=True)]
            for row in rows
        ],
        ignore_conflicts=ignore_conflicts,
    )


def values_insert(
    *, model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence[Any]], ignore_conflicts: bool = False
) -> int:
    """Insert new rows of ``model``, each given as its values for ``fields`` (in that order, as the model's
    attributes hold them); ``fields`` must name every column a new row has (``_inserted``), since no
    default is computed here. Returns how many.

    On PostgreSQL it is one ``COPY ... FROM STDIN``, each value adapted by psycopg's own (compiled) dumpers.
    ``bulk_create`` sends the rows as arrays bound on the client, and escaping each array's text was most
    of the client's cost of an assessment's inserts after its queries (benchmarks/bench_growth.py,
    docs/perf/2026-12-06-growth-flat.md); building a model instance for each row cost as much again.
    ``ignore_conflicts`` (a row whose unique key is taken is left out): one ``INSERT ... SELECT FROM
    unnest(<one array per column>) ON CONFLICT DO NOTHING`` per 1,000 rows instead, bound on the server.
    Elsewhere (SQLite) it is ``bulk_create``."""
    columns = _columns(model, fields)
    if {f.column for f in columns} != {f.column for f in _inserted(model)}:
        raise ValueError(f"{model.__name__}: the fields must name every column of a new row")
    if not rows:
        return 0
    connection = connections["default"]
    attnames = [f.attname for f in columns]
    if not on_postgresql(connection):
        made = [model(**dict(zip(attnames, values, strict=True))) for values in rows]
        model._default_manager.bulk_create(made, batch_size=2000, ignore_conflicts=ignore_conflicts)
        return len(rows)
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(str(f.column)) for f in columns)
    if ignore_conflicts:
        arrays = ", ".join(f"%b::{f.db_type(connection)}[]" for f in columns)
        # The model's own quoted columns and types; the values go as parameters.
        sql = f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING"  # noqa: S608
        _unnest_each(connection, sql, columns, rows)
        return len(rows)
    # A plain column's value goes as it is held; the others (JSON, times) through the field. Each is
    # written in the column's own binary form (psycopg's dumper for the column's type), which the server
    # takes without parsing text.
    prepared = [(i, f) for i, f in enumerate(columns) if f.get_internal_type() not in _HELD_AS]
    types = _column_types(connection, model._meta.db_table, [str(f.column) for f in columns])
    statement = f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)"  # the model's own quoted columns
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        copy.set_types(types)
        for values in rows:
            if prepared:
                values = list(values)
                for i, f in prepared:
                    values[i] = f.get_db_prep_save(values[i], connection)
            copy.write_row(values)
    return len(rows)


_TYPES: dict[tuple[str, str], dict[str, int]] = {}


def _column_types(connection: Any, table: str, columns: Sequence[str]) -> list[int]:
    """The type oids of ``table``'s ``columns`` (Django's introspection of the table), read once per database
    and table: what a binary COPY names for each value it writes. A column missing from what was read
    reads them again; a migration that changes a column's type comes with new code, so with new processes."""
    key = (str(connection.settings_dict["NAME"]), table)
    known = _TYPES.get(key)
    if known is None or any(c not in known for c in columns):
        with connection.cursor() as cursor:
            known = {f.name: int(f.type_code) for f in connection.introspection.get_table_description(cursor, table)}
        _TYPES[key] = known
    return [known[c] for c in columns]


# The lookups ``values_read`` takes, and their operators on PostgreSQL (``in``: ``= ANY`` of one array).
_READ_LOOKUPS = {"exact": "=", "in": "= ANY", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def values_read(
    *,
    model: type[models.Model],
    fields: Sequence[str],
    where: dict[str, Any],
    order_by: Sequence[str] = (),
    limit: int | None = None,
) -> list[tuple[Any, ...]]:
    """The values of ``fields`` of ``model``'s rows that ``where`` names, as
    ``model.objects.filter(**where).order_by(*order_by).values_list(*fields)[:limit]`` gives them: a read
    of plain columns (``_HELD_AS``, ids and bytes) and JSON by key, such as a batch's turns' rows.
    ``where``: a column (``name``, ``name__in``, ``__gt``, ``__gte``, ``__lt``, ``__lte``) and its value,
    never None nor a model instance (a key's pk: the ORM would take its instance, the written statement
    could not).

    On PostgreSQL it is a written statement, the same text whatever the values (a list goes as one array,
    ``= ANY``), bound on the server in psycopg's binary format on a plain psycopg cursor of the same
    connection and transaction, so that the server prepares it once per connection. Through the ORM a read
    of a batch's hundred turns cost 6 to 8 ms (building and compiling the statement, binding each key,
    making the rows); written, 1 to 4.5 ms. The six reads of a batch's assessment that use it took about 9%
    off its time against the same floor (benchmarks/bench_growth.py, docs/perf/2026-12-07-written-reads.md).
    Elsewhere (SQLite) it is the ORM's read. Django's execute wrappers do not see the written statement, as
    they do not see ``values_insert``'s COPY."""
    columns = _columns(model, fields)
    kinds = [f.get_internal_type() for f in columns]
    if any(kind not in _HELD_AS and kind not in _READ_AS_IS and kind != "JSONField" for kind in kinds):
        raise ValueError(f"{model.__name__}: values_read reads plain columns and JSON only")
    terms: list[tuple[models.Field[Any, Any], str, Any, str]] = []  # field, operator, value, bound as
    checked: dict[str, Any] = {}  # ``where`` with each list made once (a generator is read once)
    for key, given in where.items():
        name, _, lookup = key.partition("__")
        value = checked[key] = list(given) if lookup == "in" else given
        listed = value if lookup == "in" else [value]
        if lookup not in ("", *_READ_LOOKUPS) or any(v is None or isinstance(v, models.Model) for v in listed):
            raise ValueError(f"{model.__name__}: values_read cannot read {key}={value!r}")
        field = _columns(model, [name])[0]
        terms.append((field, _READ_LOOKUPS[lookup or "exact"], value, _READ_PARAM_TYPES[_plain_type(field)]))
    ordered = [(_columns(model, [name.lstrip("-")])[0], name.startswith("-")) for name in order_by]
    connection = connections["default"]
    if not on_postgresql(connection):
        found = model._default_manager.filter(**checked).order_by(*order_by).values_list(*fields)
        return list(found if limit is None else found[:limit])
    quote = connection.ops.quote_name
    conditions = []
    for field, operator, _, kind in terms:
        if operator == "= ANY":
            conditions.append(f"{quote(str(field.column))} = ANY(%b::{kind}[])")
        else:
            conditions.append(f"{quote(str(field.column))} {operator} %b::{kind}")
    # The model's own quoted columns and types; the values go as parameters.
    sql = f"SELECT {', '.join(quote(str(f.column)) for f in columns)} FROM {quote(model._meta.db_table)}"  # noqa: S608
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    if ordered:
        sql += " ORDER BY " + ", ".join(f"{quote(str(f.column))}{' DESC' if desc else ''}" for f, desc in ordered)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    import psycopg  # PostgreSQL's only

    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as raw:
        raw.execute(sql, [value for _, _, value, _ in terms])
        rows = raw.fetchall()
    # JSON arrives as its text (the loader Django gives the connection) and is decoded as the field decodes it.
    decoded = [(i, f) for i, (f, kind) in enumerate(zip(columns, kinds, strict=True)) if kind == "JSONField"]
    if not decoded:
        return rows
    read: list[tuple[Any, ...]] = []
    for row in rows:
        values = list(row)
        for i, f in decoded:
            values[i] = f.from_db_value(values[i], None, connection)  # type: ignore[attr-defined]
        read.append(tuple(values))
    return read


# Column types ``values_read`` hands over as the driver reads them, besides the plain ones: an id, and
# bytes (a journal record's line).
_READ_AS_IS = frozenset({"AutoField", "BigAutoField", "BinaryField"})

# The type each kind of column's parameter is bound as in ``values_read``: never a length-bounded type, whose
# cast would cut a longer value short and match another row.
_READ_PARAM_TYPES = {
    "BigIntegerField": "bigint",
    "BooleanField": "boolean",
    "CharField": "text",
    "IntegerField": "bigint",
    "PositiveIntegerField": "bigint",
    "SmallIntegerField": "bigint",
    "TextField": "text",
    "BigAutoField": "bigint",
    "AutoField": "bigint",
}


def _plain_type(field: models.Field[Any, Any]) -> str:
    """The field's internal type, a key's that of the column it names."""
    while isinstance(field, models.ForeignKey):
        field = field.target_field
    kind = field.get_internal_type()
    if kind not in _READ_PARAM_TYPES:
        raise ValueError(f"{field.model.__name__}.{field.name}: values_read cannot take it in a condition")
    return kind
