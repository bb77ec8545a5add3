"""The foreign keys of the rows an assessment writes for each batch, kept on PostgreSQL by triggers that check
each statement instead of FOREIGN KEY constraints (kernel/references.py; journals 0017, recovery 0023).
For every key: a row naming no parent is refused by INSERT (and by COPY, an assessment's way), a row moved
to no parent by UPDATE, a parent still referenced cannot be deleted (at COMMIT, as the deferred constraint
did), and a write locks its parent FOR KEY SHARE as the constraint's check does. Each test fails without
the triggers; SQLite keeps its constraints."""

from __future__ import annotations

import sqlite3
from itertools import count
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from journals.models import Run, Turn
from journals.services import records_ingest
from kernel.references import trigger_names
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder
from tests.store import pg_session

REFERENCES = [
    ("journals_phase", "turn_id", "journals_turn"),
    ("journals_phase", "record_id", "journals_journalrecord"),
    ("journals_intent", "turn_id", "journals_turn"),
    ("journals_turneffective", "turn_id", "journals_turn"),
    ("journals_turneffective", "run_id", "journals_run"),
    ("recovery_turnassessment", "assessment_id", "recovery_assessment"),
    ("recovery_turnassessment", "turn_id", "journals_turn"),
    ("recovery_outputentry", "assessment_id", "recovery_assessment"),
    ("recovery_outputentry", "run_id", "journals_run"),
]
# What a copy of a table's row changes besides the key, so that it takes no unique value of the row it copies.
_UNIQUE_APART = {
    "journals_phase": {"position": '"position" + 1000'},
    "journals_intent": {"intent_id": "intent_id || '-copy'"},
    "recovery_outputentry": {"ordinal": "ordinal + 100000"},
}
_numbers = count(1)


def _fk_refused() -> Any:
    import psycopg

    # Django's IntegrityError, or psycopg's own from a COPY (Django wraps errors of execute() only).
    return pytest.raises((IntegrityError, psycopg.IntegrityError), match="violates foreign key")


def _assessed() -> Run:
    """A run with a row in each of the five tables."""
    b = JournalBuilder(f"run-refs-{next(_numbers)}")
    b.full_turn("t1")
    b.plan("t2")
    b.commit("t2", "plan")
    b.dispatch("t2", "call", effect_class="unsafe")
    run = records_ingest(run_id=b.run, body=b.body(), content_type="application/x-ndjson", token=None).run
    assessment_refresh(run=run)
    return run


def _columns(table: str) -> list[str]:
    with connection.cursor() as cursor:
        return [c.name for c in connection.introspection.get_table_description(cursor, table) if c.name != "id"]


def _copy_row(cursor: Any, table: str, values: dict[str, Any], run: Run) -> None:
    """Insert a copy of one of ``run``'s rows of ``table`` with ``values`` (column -> value) in it."""
    columns = _columns(table)
    apart = _UNIQUE_APART.get(table, {})
    chosen = [("%s" if c in values else apart.get(c, f'"{c}"')) for c in columns]
    where = "run_id = %s" if "run_id" in columns else "turn_id IN (SELECT id FROM journals_turn WHERE run_id = %s)"
    names = ", ".join(f'"{c}"' for c in columns)
    cursor.execute(
        f"INSERT INTO {table} ({names}) SELECT {', '.join(chosen)} FROM {table} WHERE {where} ORDER BY 1 LIMIT 1",
        [*(values[c] for c in columns if c in values), run.pk],
    )
    assert cursor.rowcount == 1


def _fresh_turn(run: Run) -> int:
    return Turn.objects.create(run=run, turn_id=f"fresh-{next(_numbers)}", first_seq=0).pk


def _fresh_parent(cursor: Any, parent: str, run: Run) -> int:
    """A new row of ``parent`` that nothing references yet."""
    if parent == "journals_run":
        return Run.objects.create(run_id=f"run-fresh-{next(_numbers)}").pk
    if parent == "journals_turn":
        return _fresh_turn(run)
    if parent == "journals_journalrecord":
        other = Run.objects.create(run_id=f"run-fresh-{next(_numbers)}")
        cursor.execute(
            "INSERT INTO journals_journalrecord (run_id, seq, branch, lsn, kind, v, turn, digest, line, received_at)"
            " VALUES (%s, 1, 0, 0, 'note', 2, NULL, repeat('0', 64), '\\x7b7d'::bytea, now()) RETURNING id",
            [other.pk],
        )
        return int(cursor.fetchone()[0])
    other = Run.objects.create(run_id=f"run-fresh-{next(_numbers)}")
    columns = _columns("recovery_assessment")
    chosen = ["%s" if c == "run_id" else f'"{c}"' for c in columns]
    names = ", ".join(f'"{c}"' for c in columns)
    cursor.execute(
        f"INSERT INTO recovery_assessment ({names}) SELECT {', '.join(chosen)} FROM recovery_assessment"
        " WHERE run_id = %s ORDER BY id LIMIT 1 RETURNING id",
        [other.pk, run.pk],
    )
    return int(cursor.fetchone()[0])


def _child_values(table: str, column: str, key: int, run: Run) -> dict[str, Any]:
    """The values a copied row of ``table`` takes to reference ``key`` by ``column``."""
    values: dict[str, Any] = {column: key}
    if table == "journals_turneffective" and column != "turn_id":
        values["turn_id"] = _fresh_turn(run)  # a turn has one effective row
    return values


def _missing(parent: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1000 FROM {parent}")
        return int(cursor.fetchone()[0])


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgres_the_keys_are_triggers_not_constraints():
    with connection.cursor() as cursor:
        for table, column, parent in REFERENCES:
            cursor.execute(
                "SELECT count(*) FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid"
                " AND a.attnum = ANY (c.conkey) WHERE c.contype = 'f' AND c.conrelid = %s::regclass"
                " AND a.attname = %s",
                [table, column],
            )
            assert cursor.fetchone()[0] == 0, (table, column)
            inserted, updated, deleted = trigger_names((table, column, parent))
            cursor.execute(
                "SELECT tgrelid::regclass::text, tgname FROM pg_trigger WHERE tgname = ANY (%s) ORDER BY tgname",
                [[inserted, updated, deleted]],
            )
            assert set(cursor.fetchall()) == {(table, inserted), (table, updated), (parent, deleted)}


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("reference", REFERENCES, ids=lambda r: f"{r[0]}.{r[1]}")
def test_postgres_a_row_naming_no_parent_is_refused_and_one_naming_its_parent_is_kept(reference):
    table, column, parent = reference
    run = _assessed()
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        _copy_row(cursor, table, _child_values(table, column, _missing(parent), run), run)
    with transaction.atomic(), connection.cursor() as cursor:
        key = _fresh_parent(cursor, parent, run)
        _copy_row(cursor, table, _child_values(table, column, key, run), run)
        cursor.execute(f"SELECT count(*) FROM {table} WHERE {column} = %s", [key])
        assert cursor.fetchone()[0] == 1


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgres_copy_of_phases_naming_no_turn_is_refused_as_a_whole():
    """COPY (how an assessment writes a batch's new rows) fires the statement's check too."""
    run = _assessed()
    turn = Turn.objects.filter(run=run).order_by("pk").first()
    missing = _missing("journals_turn")  # read before the COPY: the connection is the COPY's until it ends
    copy_sql = "COPY journals_phase (turn_id, position, name, committed, record_id, committed_at) FROM STDIN"
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(copy_sql) as copy:
        copy.write_row((turn.pk, 50, "extra", False, None, None))
        copy.write_row((missing, 0, "plan", False, None, None))
    assert not Turn.objects.get(pk=turn.pk).phases.filter(position=50).exists()


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("reference", REFERENCES, ids=lambda r: f"{r[0]}.{r[1]}")
def test_postgres_a_row_moved_to_no_parent_is_refused_and_one_keeping_it_goes_through(reference):
    table, column, parent = reference
    _assessed()
    key = "turn_id" if table == "journals_turneffective" else "id"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {key}, {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY 1 LIMIT 1")
        row, value = cursor.fetchone()
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s WHERE {key} = %s", [_missing(parent), row])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = {column} WHERE {key} = %s", [row])
        cursor.execute(f"SELECT {column} FROM {table} WHERE {key} = %s", [row])
        assert cursor.fetchone()[0] == value


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reference", REFERENCES, ids=lambda r: f"{r[0]}.{r[1]}")
def test_postgres_a_parent_still_referenced_cannot_be_deleted(reference):
    """Checked at COMMIT, as the deferred constraint was; once its rows are gone, the parent goes."""
    table, column, parent = reference
    run = _assessed()
    with transaction.atomic(), connection.cursor() as cursor:
        key = _fresh_parent(cursor, parent, run)
        _copy_row(cursor, table, _child_values(table, column, key, run), run)
    delete = f"DELETE FROM {parent} WHERE id = %s"
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('loopx.retention', 'on', true)")  # a record is deleted by retention only
        cursor.execute(delete, [key])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {column} = %s", [key])
        cursor.execute("SELECT set_config('loopx.retention', 'on', true)")
        cursor.execute(delete, [key])
        cursor.execute(f"SELECT count(*) FROM {parent} WHERE id = %s", [key])
        assert cursor.fetchone()[0] == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reference", REFERENCES, ids=lambda r: f"{r[0]}.{r[1]}")
def test_postgres_a_write_locks_its_parent_as_the_constraint_did(reference):
    """The insert locks the parent FOR KEY SHARE: a concurrent DELETE of it waits for the writer."""
    import psycopg

    table, column, parent = reference
    run = _assessed()
    with transaction.atomic(), connection.cursor() as cursor:
        key = _fresh_parent(cursor, parent, run)
    other = pg_session()
    try:
        other.execute("SET lock_timeout = '200ms'")
        other.execute("SELECT set_config('loopx.retention', 'on', false)")
        with transaction.atomic(), connection.cursor() as cursor:
            _copy_row(cursor, table, _child_values(table, column, key, run), run)
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(f"DELETE FROM {parent} WHERE id = %s", [key])
    finally:
        other.close()


def test_sqlite_keeps_the_foreign_keys(sqlite_migrated):
    """On a database migrated by ``manage.py migrate`` (tests/store/conftest.py)."""
    db = sqlite3.connect(sqlite_migrated)
    try:
        for table, column, parent in REFERENCES:
            keys = db.execute(f"PRAGMA foreign_key_list('{table}')").fetchall()
            assert (parent, column, "id") in [(row[2], row[3], row[4]) for row in keys], (table, column)
    finally:
        db.close()
