"""Store tests. ``pg_session``: a second PostgreSQL session beside Django's, for tests of locks;
``assert_sqlite_keeps_run_foreign_key``: what SQLite keeps of a run foreign key PostgreSQL checks by triggers."""

from __future__ import annotations

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
    """SQLite keeps the constraint ``table.run_id -> journals_run.id`` it has (the model's db_constraint=False
    is PostgreSQL's truth): it is listed, and ``orphan_insert`` (a row of run 1000, which does not exist) is
    refused at COMMIT, Django declaring SQLite's keys DEFERRABLE INITIALLY DEFERRED. Nothing is kept."""
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
