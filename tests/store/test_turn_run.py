"""A turn's run: a FOREIGN KEY constraint on PostgreSQL and on SQLite (journals/migrations/
0007_turn_run_foreign_key.py restored it where 0005 had put triggers), and the two indexes no query needs
dropped (0005). Django declares the constraint DEFERRABLE INITIALLY DEFERRED: checked at COMMIT; the tests
that look at a single statement, inside the test's transaction, ask for the check at once (SET CONSTRAINTS
ALL IMMEDIATE)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from journals.models import Run, Turn
from journals.services import records_ingest
from tests.journal_builder import JournalBuilder
from tests.store import (
    assert_run_delete_and_writes_wait,
    assert_run_is_kept_while_referenced,
    assert_sqlite_keeps_run_foreign_key,
)

pytestmark = pytest.mark.django_db

_RAW_TURN = (
    "INSERT INTO journals_turn (run_id, turn_id, lineage, branch, plan, first_seq, status, completed_phases,"
    " created_at, updated_at, assessed_digest, fencing_counter)"
    " VALUES (%s, %s, NULL, 0, '[]'::jsonb, 0, 'open', '[]'::jsonb, now(), now(), '', 0)"
)
# Ingest's shape (journals.postgres._write_projection_pg): a JSON document of turns, inserted from a
# data-modifying CTE, the first planning of a turn winning.
_PLANNED_TURNS = """
WITH planned AS (
    INSERT INTO journals_turn (run_id, turn_id, lineage, branch, plan, first_seq, status, completed_phases,
        created_at, updated_at, assessed_digest, fencing_counter)
    SELECT u.run_id, u.turn_id, NULL, 0, '[]'::jsonb, 0, 'open', '[]'::jsonb, now(), now(), '', 0
    FROM jsonb_to_recordset(%s::jsonb) AS u(run_id bigint, turn_id text)
    ON CONFLICT (run_id, turn_id) DO NOTHING
    RETURNING 1
) SELECT count(*) FROM planned
"""


def _immediate(cursor: Any = None) -> None:
    """The foreign keys checked at the end of each statement, for the rest of the current transaction."""
    if cursor is None:
        with connection.cursor() as own:
            own.execute("SET CONSTRAINTS ALL IMMEDIATE")
    else:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def _fk_refused() -> Any:
    return pytest.raises(IntegrityError, match="violates foreign key")


def _planned(*turns: tuple[int, str]) -> int:
    import json

    with connection.cursor() as cursor:
        cursor.execute(_PLANNED_TURNS, [json.dumps([{"run_id": r, "turn_id": t} for r, t in turns])])
        return cursor.fetchone()[0]


@pytest.mark.postgres
def test_postgres_turn_run_is_a_foreign_key():
    """The FOREIGN KEY constraint is there on PostgreSQL, deferred to COMMIT, the triggers 0005 had put in its
    place are gone, and no UPDATE trigger on journals_turn copies the updated rows into a transition table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT condeferrable, condeferred FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid = 'journals_turn'::regclass AND confrelid = 'journals_run'::regclass"
        )
        assert cursor.fetchall() == [(True, True)]
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname = ANY (%s)",
            [["journals_run_keeps_turns", "journals_turn_run_exists", "journals_turn_run_exists_upd"]],
        )
        assert cursor.fetchall() == []
        cursor.execute(
            "SELECT proname FROM pg_proc WHERE proname = ANY (%s)",
            [["loopx_turn_run_exists", "loopx_turn_run_moved", "loopx_run_keeps_turns"]],
        )
        assert cursor.fetchall() == []
        # tgtype's bit 4 is UPDATE.
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'journals_turn'::regclass"
            " AND tgnewtable IS NOT NULL AND tgtype & 16 <> 0"
        )
        assert cursor.fetchall() == []


@pytest.mark.postgres
def test_postgres_a_turn_of_no_run_is_refused_by_every_insert():
    run = Run.objects.create(run_id="run-fk")
    missing = run.pk + 1000
    _immediate()
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_RAW_TURN, [missing, "t1"])
    # One statement naming a real run and a missing one: refused as a whole.
    with _fk_refused(), transaction.atomic():
        _planned((run.pk, "t1"), (missing, "t2"))
    with _fk_refused(), transaction.atomic():
        Turn.objects.create(run_id=missing, turn_id="t1")
    with _fk_refused(), transaction.atomic():  # the assessment's path
        Turn.objects.bulk_create(
            [Turn(run=run, turn_id="t1"), Turn(run_id=missing, turn_id="t2")],
            ignore_conflicts=True,
        )
    assert not Turn.objects.exists()

    # A real run's turns go in; planned again, they conflict and nothing is written (the check sees no row).
    assert _planned((run.pk, "t1"), (run.pk, "t2")) == 2
    assert _planned((run.pk, "t1")) == 0
    assert _planned() == 0
    # Ingest plans through the same statement shape.
    builder = JournalBuilder("run-ingest")
    builder.plan("t1")
    builder.plan("t2")
    result = records_ingest(run_id=builder.run, body=builder.body(), content_type="application/x-ndjson", token=None)
    assert sorted(Turn.objects.filter(run=result.run).values_list("turn_id", flat=True)) == ["t1", "t2"]
    assert Turn.objects.filter(run=run).count() == 2
    assert not Turn.objects.filter(run_id=missing).exists()


@pytest.mark.postgres
def test_postgres_a_turn_moved_to_no_run_is_refused_and_updates_keeping_the_run_go_through():
    """A move to a run that does not exist is refused, however the update is written; updates that keep the
    run (the ORM's save() puts run_id in the SET list) and a move to a real run go through."""
    run, other = Run.objects.create(run_id="run-a"), Run.objects.create(run_id="run-b")
    turn = Turn.objects.create(run=run, turn_id="t1")
    missing = other.pk + 1000
    _immediate()
    with _fk_refused(), transaction.atomic():
        Turn.objects.filter(pk=turn.pk).update(run_id=missing)
    with _fk_refused(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE journals_turn SET run_id = %s, decision = 'blocked' WHERE id = %s", [missing, turn.pk])
    turn.run_id = missing
    with _fk_refused(), transaction.atomic():
        turn.save()
    turn.refresh_from_db()
    assert turn.run_id == run.pk

    assert Turn.objects.filter(pk=turn.pk).update(decision="blocked", run_id=run.pk) == 1
    turn.refresh_from_db()
    turn.status = "failed"
    turn.save()
    turn.decision = "resume"
    Turn.objects.bulk_update([turn], ["decision", "updated_at"])
    Turn.objects.filter(pk=turn.pk).update(run_id=other.pk)
    turn.refresh_from_db()
    assert (turn.run_id, turn.decision, turn.status) == (other.pk, "resume", "failed")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_a_run_with_turns_cannot_be_deleted_or_renumbered():
    """The delete side, checked at COMMIT as the deferred constraint was; a run without turns goes."""
    kept, empty = Run.objects.create(run_id="run-kept"), Run.objects.create(run_id="run-empty")
    Turn.objects.create(run=kept, turn_id="t1")
    assert_run_is_kept_while_referenced(kept, empty)
    # So does a run whose turns are deleted after it, before COMMIT.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM journals_run WHERE id = %s", [kept.pk])
        cursor.execute("DELETE FROM journals_turn WHERE run_id = %s", [kept.pk])
    assert not Run.objects.filter(pk=kept.pk).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_a_run_delete_and_a_turn_write_wait_for_each_other():
    """The constraint's check locks the run FOR KEY SHARE on both write sides (here at the statement, asked
    for at once): a concurrent DELETE of the run waits for the transaction that inserted a turn of it, or
    moved one to it (and is then refused), and an insert or a move to a run deleted by an open transaction
    waits for it (and is refused once the delete commits)."""

    def insert(cursor: Any, run: Run) -> None:
        _immediate(cursor)
        cursor.execute(_RAW_TURN, [run.pk, "t1"])

    def move(cursor: Any, run: Run) -> None:
        _immediate(cursor)
        cursor.execute("UPDATE journals_turn SET run_id = %s WHERE id = %s", [run.pk, moved.pk])

    inserted, moved_to = Run.objects.create(run_id="run-inserted"), Run.objects.create(run_id="run-moved-to")
    moved = Turn.objects.create(run=Run.objects.create(run_id="run-spare"), turn_id="moved")
    gone = Run.objects.create(run_id="run-gone")
    assert_run_delete_and_writes_wait([(insert, inserted), (move, moved_to)], gone)
    assert list(Turn.objects.filter(run=inserted).values_list("turn_id", flat=True)) == ["t1"]
    assert Turn.objects.get(pk=moved.pk).run_id == moved_to.pk
    assert not Turn.objects.filter(run_id=gone.pk).exists()


def test_turn_indexes_lead_with_what_the_lists_need():
    """Neither run_id nor updated_at has an index of its own (each an insertion per planned turn that no
    query needs); the indexes that serve those lookups remain, and so does created_at's."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Turn._meta.db_table)
    single = {tuple(c["columns"]) for c in constraints.values() if c["index"] and not c["unique"]}
    assert ("run_id",) not in single
    assert ("updated_at",) not in single
    assert ("created_at",) in single
    columns = {name: c["columns"] for name, c in constraints.items() if c["index"] or c["unique"]}
    assert columns["turn_unique_per_run"] == ["run_id", "turn_id"]
    assert columns["turn_run_updated_id"] == ["run_id", "updated_at", "id"]
    assert columns["turn_updated_id"] == ["updated_at", "id"]
    assert columns["turn_decision_updated"] == ["decision", "updated_at"]
    assert columns["turn_reason_updated"] == ["reason", "updated_at"]


def test_sqlite_keeps_the_turn_run_foreign_key(sqlite_migrated):
    """On a database migrated by ``manage.py migrate`` (tests/store/conftest.py)."""
    assert_sqlite_keeps_run_foreign_key(
        sqlite_migrated,
        "journals_turn",
        "INSERT INTO journals_turn (run_id, turn_id, branch, plan, first_seq, status, completed_phases,"
        " created_at, updated_at, assessed_digest, fencing_counter) VALUES (1000, 't1', 0, '[]', 0, 'open', '[]',"
        " '2026-01-01 00:00:00', '2026-01-01 00:00:00', '', 0)",
    )
