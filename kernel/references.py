"""Foreign keys kept by triggers that check each statement, on PostgreSQL, for the tables an assessment
writes a batch's rows into.

A FOREIGN KEY constraint checks every row on its own: at COMMIT, one lookup (and one FOR KEY SHARE lock) of
the referenced row per row written. An assessment writes about a thousand rows a batch into five tables
(a turn's Phase and Intent rows, its TurnAssessment, OutputEntry and TurnEffective rows) and those checks
were most of its COMMIT (docs/perf/2026-12-06-batch-rows.md). The same invariant, kept by three
triggers per key (the journal records' and the turns' run already are: journals migrations 0004 and 0005):

- insert side (``loopx_fk_<table>_<column>``, AFTER INSERT, FOR EACH STATEMENT over the statement's
  transition table): every distinct key the statement wrote must name a row of the referenced table, and
  those rows are locked FOR KEY SHARE, as the constraint's own check locks them, so that a concurrent
  DELETE of one waits for this transaction and then sees its rows. Raised as foreign_key_violation (23503,
  Django's IntegrityError) at the end of the statement, not at COMMIT as the DEFERRABLE INITIALLY DEFERRED
  constraint was: no code path writes a row before the row it references.
- update side (``..._upd``, AFTER UPDATE OF the column, FOR EACH ROW WHEN the key changed, with a function
  of the same name): the new key must name a row, locked FOR KEY SHARE. An update that keeps the key
  queues no trigger event at all, as the constraint's check skips an unchanged key.
- delete side (``..._del`` on the referenced table, a constraint trigger AFTER DELETE OR UPDATE OF id,
  DEFERRABLE INITIALLY DEFERRED as the constraint was, with a function of the same name): at COMMIT, an id
  that no longer exists must have no row referencing it. Like the constraint's NO ACTION check it reads
  with a fresh snapshot, which is READ COMMITTED's, the isolation level of this project. Each referencing
  column has an index leading with it (docs/deployment.md), so the check is one index probe. The per-row
  functions are written for their key in plain SQL, so each session plans them once, as the constraint's
  own checks are.

SQLite keeps its FOREIGN KEY constraints: a model's state says ``db_constraint=False`` (the truth on
PostgreSQL), and the migration leaves SQLite's tables as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel.dialect import postgres_only

# (table, column, referenced table): the referenced table's key is its ``id``.
Reference = tuple[str, str, str]

FUNCTIONS = """
CREATE OR REPLACE FUNCTION loopx_rows_reference() RETURNS trigger AS $$
DECLARE
    wanted bigint[];
    found integer;
BEGIN
    EXECUTE format('SELECT array_agg(DISTINCT %1$I) FROM written WHERE %1$I IS NOT NULL', TG_ARGV[0])
        INTO wanted;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I WHERE id = ANY ($1) FOR KEY SHARE) AS locked', TG_ARGV[1])
        INTO found USING wanted;
    IF found < coalesce(cardinality(wanted), 0) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = TG_NAME,
            MESSAGE = format('insert or update on table "%s" violates foreign key %s.%s -> %s.id',
                TG_TABLE_NAME, TG_TABLE_NAME, TG_ARGV[0], TG_ARGV[1]),
            DETAIL = format('A %s of the statement is not present in table "%s".', TG_ARGV[0], TG_ARGV[1]);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""

DROP_FUNCTIONS = """
DROP FUNCTION IF EXISTS loopx_rows_reference();
"""


def trigger_names(reference: Reference) -> tuple[str, str, str]:
    """The insert, update and delete triggers of one key (the last on the referenced table)."""
    table, column, _ = reference
    name = f"loopx_fk_{table}_{column}"
    return name, f"{name}_upd", f"{name}_del"


def _create(reference: Reference) -> str:
    """The key's three triggers. The per-row ones run functions of their own with plain SQL, whose plans the
    session keeps: a delete of many parents (retention) checks each row as cheaply as the constraint did."""
    table, column, parent = reference
    inserted, updated, deleted = trigger_names(reference)
    key = f"{table}.{column} -> {parent}.id"
    return f"""
CREATE TRIGGER {inserted} AFTER INSERT ON {table} REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION loopx_rows_reference('{column}', '{parent}');

CREATE OR REPLACE FUNCTION {updated}() RETURNS trigger AS $$
BEGIN
    IF NEW.{column} IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM {parent} WHERE id = NEW.{column} FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = '{updated}',
            MESSAGE = 'insert or update on table "{table}" violates foreign key {key}',
            DETAIL = 'Key ({column})=(' || NEW.{column} || ') is not present in table "{parent}".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER {updated} AFTER UPDATE OF {column} ON {table}
    FOR EACH ROW WHEN (OLD.{column} IS DISTINCT FROM NEW.{column}) EXECUTE FUNCTION {updated}();

CREATE OR REPLACE FUNCTION {deleted}() RETURNS trigger AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {parent} WHERE id = OLD.id)
            AND EXISTS (SELECT 1 FROM {table} WHERE {column} = OLD.id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = '{deleted}',
            MESSAGE = 'update or delete on table "{parent}" violates foreign key {key}',
            DETAIL = 'Key (id)=(' || OLD.id || ') is still referenced from table "{table}".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER {deleted} AFTER DELETE OR UPDATE OF id ON {parent}
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {deleted}();
"""  # noqa: S608  the names are the migration's own constants, never input


def _drop(reference: Reference) -> str:
    table, column, parent = reference
    inserted, updated, deleted = trigger_names(reference)
    return f"""
DROP TRIGGER IF EXISTS {deleted} ON {parent};
DROP TRIGGER IF EXISTS {updated} ON {table};
DROP TRIGGER IF EXISTS {inserted} ON {table};
DROP FUNCTION IF EXISTS {deleted}();
DROP FUNCTION IF EXISTS {updated}();
ALTER TABLE {table} ADD CONSTRAINT {inserted}
    FOREIGN KEY ({column}) REFERENCES {parent} (id) DEFERRABLE INITIALLY DEFERRED;
"""


def _script(schema_editor: Any, sql: str) -> None:
    """Run ``sql`` as it is: without parameters, so that the functions' ``format()`` patterns are not read as
    placeholders."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql)


def statement_references(references: Sequence[Reference], *, drop_functions: bool = False) -> Any:
    """A migration operation: each of ``references`` kept by the triggers above instead of its FOREIGN KEY
    constraint, on PostgreSQL only. Back: the constraints again (and, with ``drop_functions``, the shared
    functions gone: for the migration that made them, which is reversed last)."""

    def forward(apps: Any, schema_editor: Any) -> None:
        _script(schema_editor, FUNCTIONS)
        for reference in references:
            table, column, parent = reference
            with schema_editor.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT c.conname FROM pg_constraint c JOIN pg_attribute a"
                    " ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)"
                    " WHERE c.contype = 'f' AND c.conrelid = %s::regclass AND c.confrelid = %s::regclass"
                    " AND a.attname = %s",
                    [table, parent, column],
                )
                names = [row[0] for row in cursor.fetchall()]
            for name in names:
                schema_editor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            _script(schema_editor, _create(reference))

    def reverse(apps: Any, schema_editor: Any) -> None:
        for reference in references:
            _script(schema_editor, _drop(reference))
        if drop_functions:
            _script(schema_editor, DROP_FUNCTIONS)

    return postgres_only(forward, reverse)
