"""Store tests. ``pg_session``: a second PostgreSQL session beside Django's, for tests of locks;
``assert_sqlite_keeps_run_foreign_key``: SQLite's run foreign keys;
``assert_run_is_kept_while_referenced``: the delete side of such a key on PostgreSQL;
``assert_run_delete_and_writes_wait``: its lock, FOR KEY SHARE as the constraint's own check takes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def pg_session() -> Any:
    """A second PostgreSQL session on the test database (autocommit), beside Django's connection."""
    import psycopg
    from django.db import connection

    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    )


def assert_sqlite_keeps_run_foreign_key(database: Path, table: str, orphan_insert: str, params: tuple = ()) -> None:
    """SQLite has the constraint ``table.run_id -> journals_run.id``: it is listed, and ``orphan_insert`` (a
    row of run 1000, which does not exist) is refused at COMMIT, Django declaring SQLite's keys DEFERRABLE
    INITIALLY DEFERRED. Nothing is kept."""
    import sqlite3

    db = sqlite3.connect(database)
    try:
        keys = db.execute(f"PRAGMA foreign_key_list('{table}')").fetchall()
        assert [(row[2], row[3], row[4]) for row in keys] == [("journals_run", "run_id", "id")]
        db.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            db.execute(orphan_insert, params)
            db.commit()
    finally:
        db.close()


def assert_run_is_kept_while_referenced(kept: Any, empty: Any) -> None:
    """The delete side of a run foreign key on PostgreSQL, checked at COMMIT (a record's by 0004's deferred
    constraint trigger, a turn's by its deferred constraint): ``kept`` (a run something references) can be
    neither deleted nor renumbered, refused at COMMIT; a renumbering undone before COMMIT passes, as NO
    ACTION allows; ``empty`` (a run nothing references) is deleted."""
    import psycopg
    from django.db import IntegrityError, connection, transaction

    from journals.models import Run

    for sql in ("DELETE FROM journals_run WHERE id = %s", "UPDATE journals_run SET id = id + 1000 WHERE id = %s"):
        with (
            pytest.raises((IntegrityError, psycopg.IntegrityError), match="violates foreign key"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, [kept.pk])
    assert Run.objects.filter(pk=kept.pk).exists()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE journals_run SET id = id + 1000 WHERE id = %s", [kept.pk])
        cursor.execute("UPDATE journals_run SET id = id - 1000 WHERE id = %s", [kept.pk + 1000])
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM journals_run WHERE id = %s", [empty.pk])
    assert not Run.objects.filter(pk=empty.pk).exists()


def assert_run_delete_and_writes_wait(writes: list[tuple[Callable[[Any, Any], None], Any]], gone: Any) -> None:
    """Each ``write(cursor, run)`` (a row referencing ``run`` written on Django's connection) locks the run
    FOR KEY SHARE, as a foreign key's check does: a concurrent DELETE of the run waits for the writing
    transaction (and is then refused), and the write for a run (``gone``) deleted by an open transaction
    waits for it (and is refused once the delete commits)."""
    import psycopg
    from django.db import DatabaseError, IntegrityError, connection, transaction

    delete = "DELETE FROM journals_run WHERE id = %s"
    other = pg_session()
    try:
        other.execute("SET lock_timeout = '200ms'")
        for write, run in writes:
            with transaction.atomic(), connection.cursor() as cursor:
                write(cursor, run)
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute(delete, [run.pk])
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                other.execute(delete, [run.pk])
        with other.transaction():
            other.execute(delete, [gone.pk])
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '200ms'")
                for write, _ in writes:
                    with pytest.raises(DatabaseError, match="lock timeout"), transaction.atomic():
                        write(cursor, gone)
                cursor.execute("SET lock_timeout = 0")
        for write, _ in writes:
            with (
                pytest.raises((IntegrityError, psycopg.IntegrityError), match="violates foreign key"),
                transaction.atomic(),
                connection.cursor() as cursor,
            ):
                write(cursor, gone)
    finally:
        other.close()
