"""A journal record's run on PostgreSQL: kept by triggers checking each statement instead of a FOREIGN KEY
constraint checking each row (journals/migrations/0004_record_run_statement_check.py). Each test fails
without the triggers; SQLite keeps its constraint."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, NotSupportedError, connection, transaction
from django.utils import timezone

from journals.models import JournalRecord, Run
from tests.store import (
    assert_run_delete_and_writes_wait,
    assert_run_is_kept_while_referenced,
    assert_sqlite_keeps_run_foreign_key,
)

pytestmark = pytest.mark.django_db

_RAW_RECORD = (
    "INSERT INTO journals_journalrecord (run_id, seq, branch, lsn, kind, v, turn, digest, line, received_at)"
    " VALUES (%s, %s, 0, %s, 'note', 2, NULL, repeat('0', 64), '\\x7b7d'::bytea, now())"
)


def _fk_refused() -> Any:
    import psycopg

    # Django's IntegrityError, or psycopg's own from a COPY (Django wraps errors of execute() only).
    return pytest.raises((IntegrityError, psycopg.IntegrityError), match="violates foreign key")


@pytest.mark.postgres
def test_postgres_record_run_is_checked_per_statement_not_per_row():
    """The FOREIGN KEY constraint is gone on PostgreSQL (the tests below see the triggers, nothing else)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid = 'journals_journalrecord'::regclass AND confrelid = 'journals_run'::regclass"
        )
        assert cursor.fetchone()[0] == 0
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgfoid::regproc::text = ANY (%s) ORDER BY tgname",
            [["loopx_journalrecord_run_exists", "loopx_run_keeps_records"]],
        )
        assert [row[0] for row in cursor.fetchall()] == [
            "journals_journalrecord_run_exists",
            "journals_journalrecord_run_exists_upd",
            "journals_run_keeps_records",
        ]


@pytest.mark.postgres
def test_postgres_a_record_of_no_run_is_refused_by_insert_and_by_copy():
    run = Run.objects.create(run_id="run-fk")
    missing = run.pk + 1000
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_RAW_RECORD, [missing, 1, 0])
    # One statement naming a real run and a missing one: refused as a whole.
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO journals_journalrecord (run_id, seq, branch, lsn, digest, line, received_at)"
            " VALUES (%s, 1, 0, 0, repeat('0', 64), '\\x7b7d'::bytea, now()),"
            " (%s, 1, 0, 0, repeat('0', 64), '\\x7b7d'::bytea, now())",
            [run.pk, missing],
        )
    # COPY (ingest's path) fires the statement trigger too.
    copy_sql = "COPY journals_journalrecord (run_id, seq, branch, lsn, digest, line, received_at) FROM STDIN"
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(copy_sql) as copy:
        copy.write_row((run.pk, 1, 0, 0, "0" * 64, b"{}", timezone.now()))
        copy.write_row((missing, 1, 0, 0, "0" * 64, b"{}", timezone.now()))
    with connection.cursor() as cursor:
        cursor.execute(_RAW_RECORD, [run.pk, 1, 0])
    assert JournalRecord.objects.filter(run=run).count() == 1
    assert not JournalRecord.objects.filter(run_id=missing).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_a_run_with_records_cannot_be_deleted_or_renumbered():
    """The delete side, checked at COMMIT as the deferred constraint was; a run without records goes."""
    kept, empty = Run.objects.create(run_id="run-kept"), Run.objects.create(run_id="run-empty")
    with connection.cursor() as cursor:
        cursor.execute(_RAW_RECORD, [kept.pk, 1, 0])
    assert_run_is_kept_while_referenced(kept, empty)
    # TRUNCATE stays refused: other foreign keys reference the runs (branches, checkpoints, ...).
    with pytest.raises(NotSupportedError, match="cannot truncate"), transaction.atomic(), connection.cursor() as c:
        c.execute("TRUNCATE journals_run")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_a_run_delete_and_a_record_insert_wait_for_each_other():
    """The insert side locks the run FOR KEY SHARE, as the constraint's check does: a concurrent DELETE of
    the run waits for the inserting transaction (and is then refused), and an insert for a run deleted by an
    open transaction waits for it (and is refused once the delete commits)."""
    run, gone = Run.objects.create(run_id="run-race"), Run.objects.create(run_id="run-gone")

    def insert(cursor: Any, target: Run) -> None:
        cursor.execute(_RAW_RECORD, [target.pk, 1, 0])

    assert_run_delete_and_writes_wait([(insert, run)], gone)
    assert JournalRecord.objects.filter(run=run).count() == 1
    assert not JournalRecord.objects.filter(run_id=gone.pk).exists()


def test_sqlite_keeps_the_record_run_foreign_key(sqlite_migrated):
    """On a database migrated by ``manage.py migrate`` (tests/store/conftest.py)."""
    assert_sqlite_keeps_run_foreign_key(
        sqlite_migrated,
        "journals_journalrecord",
        "INSERT INTO journals_journalrecord (run_id, seq, branch, lsn, kind, v, turn, digest, line, received_at)"
        " VALUES (1000, 1, 0, 0, 'note', 2, NULL, ?, X'7b7d', '2026-01-01 00:00:00')",
        ("0" * 64,),
    )
