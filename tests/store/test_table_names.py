"""Each table is named for the app that owns it: the renames run forward from the layout before them and back,
keeping every row and, on PostgreSQL, the append-only trigger named for its table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from kernel.dialect import on_postgresql

BEFORE = [
    ("journals", "0011_pending_assessment_lease"),
    ("trail", "0002_turn_assign_kinds"),
    ("recovery", "0012_turnassignment"),
]
RENAMED = {
    "recovery_pendingassessment": "journals_pendingassessment",
    "audits_operatoraction": "trail_operatoraction",
    "audits_trailhead": "trail_trailhead",
    "audits_finding": "recovery_finding",
    "audits_recoveryaudit": "recovery_recoveryaudit",
    "audits_recoveryauditaction": "recovery_recoveryauditaction",
    "audits_recoveryauditclosure": "recovery_recoveryauditclosure",
    "audits_recoverydivergence": "recovery_recoverydivergence",
}
TRIGGERED = ["operatoraction", "recoveryaudit", "recoveryauditaction", "recoveryauditclosure", "recoverydivergence"]


def _tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


def _triggers() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
        return {row[0] for row in cursor.fetchall()}


def _migrate(targets: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    yield
    executor = MigrationExecutor(connection)
    _migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_tables_renamed_forward_and_back_keep_their_rows(back_to_latest: None) -> None:
    every_model_table = {model._meta.db_table for model in apps.get_models()}
    assert set(RENAMED.values()) <= every_model_table
    assert not {table for table in every_model_table if table.startswith("audits_")} - {
        model._meta.db_table for model in apps.get_app_config("audits").get_models()
    }

    _migrate(BEFORE)
    tables = _tables()
    assert set(RENAMED) <= tables and not set(RENAMED.values()) & tables
    with connection.cursor() as cursor:
        # A row written under the old layout, as today's databases hold them.
        cursor.execute("DELETE FROM audits_trailhead")
        cursor.execute("INSERT INTO audits_trailhead (id, seq, digest) VALUES (1, 7, %s)", ["ab" * 32])
    if on_postgresql(connection):
        assert {f"audits_{name}_append_only" for name in TRIGGERED} <= _triggers()

    _migrate(
        [
            ("journals", "0012_table_named_for_its_app"),
            ("trail", "0003_tables_named_for_their_app"),
            ("recovery", "0013_tables_named_for_their_app"),
        ]
    )
    tables = _tables()
    assert set(RENAMED.values()) <= tables and not set(RENAMED) & tables
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq, digest FROM trail_trailhead WHERE id = 1")
        assert cursor.fetchone() == (7, "ab" * 32)
    if on_postgresql(connection):
        triggers = _triggers()
        assert {"trail_operatoraction_append_only"} | {f"recovery_{n}_append_only" for n in TRIGGERED[1:]} <= triggers
        assert not {f"audits_{name}_append_only" for name in TRIGGERED} & triggers

    _migrate(BEFORE)
    assert set(RENAMED) <= _tables()
    if on_postgresql(connection):
        assert {f"audits_{name}_append_only" for name in TRIGGERED} <= _triggers()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM audits_trailhead")
