"""Store tests. ``pg_session``: a second PostgreSQL session beside Django's, for tests of locks."""

from __future__ import annotations

from typing import Any


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
