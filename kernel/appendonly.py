"""Append-only models: rows are inserted once and never updated or deleted by any code path.

Three layers, because each one alone has a hole:
- ``AppendOnlyModel.save``/``delete`` refuse updates and deletes of a single instance;
- ``AppendOnlyQuerySet`` refuses ``update()``, ``delete()`` and ``bulk_update()`` (they bypass ``save``);
- on PostgreSQL a trigger (``append_only_trigger_sql``, installed by each app's migration) raises on UPDATE
  and DELETE, so even raw SQL cannot rewrite evidence. TRUNCATE is not caught by a row trigger: it is an
  administrator's act on the whole table, not a code path of the application.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import models

from kernel.dialect import postgres_only

_M = TypeVar("_M", bound=models.Model)


class AppendOnlyError(Exception):
    """Raised when code tries to update or delete an append-only row."""


class AppendOnlyQuerySet(models.QuerySet[_M]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnlyError(f"{self.model.__name__} is append-only: rows are never updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{self.model.__name__} is append-only: rows are never deleted")

    def bulk_update(self, objs: Any, fields: Any, batch_size: int | None = None) -> int:
        raise AppendOnlyError(f"{self.model.__name__} is append-only: rows are never updated")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        # `_state.adding` is False for any row loaded from or already written to the database.
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} is append-only: rows are never updated")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{type(self).__name__} is append-only: rows are never deleted")


def append_only_trigger_sql(table: str) -> tuple[str, str]:
    """(forward, reverse) PostgreSQL for a trigger that refuses UPDATE and DELETE on ``table``.

    The SQL holds no percent sign: it goes through the driver's parameter formatting.
    """
    forward = f"""
        CREATE OR REPLACE FUNCTION loopx_refuse_change() RETURNS trigger AS $$
        BEGIN
            RAISE EXCEPTION USING
                MESSAGE = 'append-only table ' || TG_TABLE_NAME || ': ' || TG_OP || ' refused',
                ERRCODE = 'integrity_constraint_violation';
        END;
        $$ LANGUAGE plpgsql;
        DROP TRIGGER IF EXISTS {table}_append_only ON {table};
        CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION loopx_refuse_change();
    """
    reverse = f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};"
    return forward, reverse


def install_append_only_triggers(tables: list[str]) -> Any:
    """A migration operation installing the triggers on PostgreSQL; a no-op on other databases."""
    return postgres_only(
        "".join(append_only_trigger_sql(table)[0] for table in tables),
        "".join(append_only_trigger_sql(table)[1] for table in tables),
    )


def rename_append_only_trigger(old_table: str, new_table: str) -> Any:
    """A migration operation, placed after the table's rename, that names its trigger for the new table.

    PostgreSQL carries a trigger along when its table is renamed but keeps the trigger's name; the trigger is
    found by ``<table>_append_only``, so the name follows the table. Unapplied, it runs before the rename back.
    """
    return postgres_only(
        f"ALTER TRIGGER {old_table}_append_only ON {new_table} RENAME TO {new_table}_append_only;",
        f"ALTER TRIGGER {new_table}_append_only ON {new_table} RENAME TO {old_table}_append_only;",
    )
