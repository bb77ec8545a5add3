"""The one place that asks which database it is talking to.

The project runs on SQLite (a newcomer's machine, most tests) and on PostgreSQL (production). Reads and
writes go through the ORM, which speaks both. What only PostgreSQL has goes through here:

- ``on_postgresql``: the test itself, for the few callers that take a PostgreSQL-only path (the journal
  store's choice, journals/store.py);
- ``set_local``: a transaction-local setting (``set_config(..., true)``), which SQLite has no notion of;
- ``postgres_only``: a migration operation for triggers and functions, which only PostgreSQL gets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connections

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
