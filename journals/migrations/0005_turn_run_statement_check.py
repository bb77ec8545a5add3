# PostgreSQL: the foreign key journals_turn.run_id -> journals_run.id is kept by triggers instead of a
# FOREIGN KEY constraint, as 0004 did for journal records: the constraint checks every row on its own at
# COMMIT, one lookup of the run per planned turn, though a batch's turns share one run. The same
# invariant, checked per statement on insert and only for a row that moves on update:
#
# - insert side (journals_turn_run_exists, AFTER INSERT, FOR EACH STATEMENT over the statement's transition
#   table): every distinct run_id the statement wrote must be a run, and that run row is locked FOR KEY
#   SHARE, as the constraint's own check locks it, so that a concurrent DELETE of the run (or change of its
#   id) waits for this transaction and then sees its turns. Ingest's INSERT ... ON CONFLICT DO NOTHING in a
#   data-modifying CTE and the assessment's bulk_create fire it once per statement. Raised as
#   foreign_key_violation (23503, Django's IntegrityError) at the end of the statement, not at COMMIT as the
#   DEFERRABLE INITIALLY DEFERRED constraint was: no code path writes a turn before its run (a turn needs
#   its run's pk, which exists once the run row does).
# - update side (journals_turn_run_exists_upd, AFTER UPDATE OF run_id, FOR EACH ROW WHEN the run_id
#   changed): the new run must exist, locked FOR KEY SHARE. Not a statement trigger over a transition table
#   as for records: turns are updated all the time (each assessment rewrites the turns whose picture
#   changed, a claim bumps the fencing counter), and such a trigger takes no column list, so it would fire
#   on every UPDATE and copy every updated row. The WHEN clause is evaluated as the row is updated: an
#   update that keeps the run (Turn.save() puts run_id in the SET list) queues no trigger event at all, as
#   the constraint's check skips an unchanged key.
# - delete side (journals_run_keeps_turns, a constraint trigger AFTER DELETE OR UPDATE OF id on
#   journals_run, DEFERRABLE INITIALLY DEFERRED as the constraint was): at COMMIT, a run id that no longer
#   exists must have no turn. Like the constraint's NO ACTION check (and 0004's journals_run_keeps_records)
#   it reads with a fresh snapshot, which is READ COMMITTED's, the isolation level of this project. It finds
#   a run's turns by the unique (run_id, turn_id) index.
#
# Two indexes go as well, each an insertion per planned turn that no query needs: journals_turn's FK index
# on run_id (every lookup by run is served by turn_unique_per_run (run_id, turn_id) or turn_run_updated_id
# (run_id, updated_at DESC, id DESC)) and the single-column index on updated_at (turn_updated_id
# (updated_at DESC, id DESC) serves the same ranges and orderings). created_at keeps its index (the lists'
# created_after/created_before filters and sorts use it). Dropped on SQLite too, by DROP INDEX: an
# AlterField there would rebuild the table, without its FOREIGN KEY (the state's db_constraint=False).
#
# TRUNCATE journals_run stays refused by the other foreign keys on it (branches, checkpoints, ...).
# tests/store/test_turn_run.py proves each case on PostgreSQL, that the constraint and the two indexes are
# gone, and that SQLite keeps its FOREIGN KEY: the model's state says db_constraint=False (the truth on
# PostgreSQL), but this migration leaves SQLite's constraint as it is.
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from kernel.dialect import postgres_only

FORWARD = """
CREATE OR REPLACE FUNCTION loopx_turn_run_exists() RETURNS trigger AS $$
DECLARE
    runs bigint[];
    found integer;
BEGIN
    SELECT array_agg(DISTINCT run_id) INTO runs FROM written;
    SELECT count(*) INTO found FROM (SELECT 1 FROM journals_run WHERE id = ANY (runs) FOR KEY SHARE) AS locked;
    IF found < coalesce(cardinality(runs), 0) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'journals_turn_run_exists',
            MESSAGE = 'insert or update on table "journals_turn" violates foreign key'
                || ' journals_turn.run_id -> journals_run.id',
            DETAIL = 'A run_id of the statement is not present in table "journals_run".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER journals_turn_run_exists AFTER INSERT ON journals_turn
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION loopx_turn_run_exists();

CREATE OR REPLACE FUNCTION loopx_turn_run_moved() RETURNS trigger AS $$
BEGIN
    PERFORM 1 FROM journals_run WHERE id = NEW.run_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'journals_turn_run_exists',
            MESSAGE = 'insert or update on table "journals_turn" violates foreign key'
                || ' journals_turn.run_id -> journals_run.id',
            DETAIL = 'Key (run_id)=(' || NEW.run_id || ') is not present in table "journals_run".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER journals_turn_run_exists_upd AFTER UPDATE OF run_id ON journals_turn
    FOR EACH ROW WHEN (OLD.run_id IS DISTINCT FROM NEW.run_id) EXECUTE FUNCTION loopx_turn_run_moved();

CREATE OR REPLACE FUNCTION loopx_run_keeps_turns() RETURNS trigger AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM journals_run WHERE id = OLD.id)
            AND EXISTS (SELECT 1 FROM journals_turn WHERE run_id = OLD.id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'journals_run_keeps_turns',
            MESSAGE = 'update or delete on table "journals_run" violates foreign key'
                || ' journals_turn.run_id -> journals_run.id',
            DETAIL = 'Key (id)=(' || OLD.id || ') is still referenced from table "journals_turn".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER journals_run_keeps_turns AFTER DELETE OR UPDATE OF id ON journals_run
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION loopx_run_keeps_turns();
"""

REVERSE_TRIGGERS = """
DROP TRIGGER IF EXISTS journals_run_keeps_turns ON journals_run;
DROP TRIGGER IF EXISTS journals_turn_run_exists_upd ON journals_turn;
DROP TRIGGER IF EXISTS journals_turn_run_exists ON journals_turn;
DROP FUNCTION IF EXISTS loopx_run_keeps_turns();
DROP FUNCTION IF EXISTS loopx_turn_run_moved();
DROP FUNCTION IF EXISTS loopx_turn_run_exists();
"""

# The constraint and the indexes as 0001_initial created them (Django's names, the same on SQLite), for the
# way back.
CONSTRAINT = "journals_turn_run_id_19abe67c_fk_journals_run_id"
REVERSE_CONSTRAINT = f"""
ALTER TABLE journals_turn ADD CONSTRAINT {CONSTRAINT}
    FOREIGN KEY (run_id) REFERENCES journals_run (id) DEFERRABLE INITIALLY DEFERRED;
"""
INDEXES = {"run_id": "journals_turn_run_id_19abe67c", "updated_at": "journals_turn_updated_at_9899ce44"}


def _single_column_indexes(schema_editor, column):
    """The plain indexes on ``column`` alone, whatever they are named (not the unique or composite ones)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "journals_turn")
    return sorted(
        name
        for name, c in constraints.items()
        if c["index"] and not c["unique"] and not c["primary_key"] and c["columns"] == [column]
    )


def drop_indexes(apps, schema_editor):
    for column in INDEXES:
        for name in _single_column_indexes(schema_editor, column):
            schema_editor.execute(f'DROP INDEX "{name}"')


def create_indexes(apps, schema_editor):
    for column, name in INDEXES.items():
        schema_editor.execute(f'CREATE INDEX "{name}" ON journals_turn ("{column}")')


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid = 'journals_turn'::regclass AND confrelid = 'journals_run'::regclass"
        )
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        schema_editor.execute(f'ALTER TABLE journals_turn DROP CONSTRAINT "{name}"')
    schema_editor.execute(FORWARD)


def reverse(apps, schema_editor):
    schema_editor.execute(REVERSE_TRIGGERS)
    schema_editor.execute(REVERSE_CONSTRAINT)


class Migration(migrations.Migration):
    dependencies = [("journals", "0004_record_run_statement_check")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="turn",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="turns",
                        to="journals.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="turn",
                    name="updated_at",
                    field=models.DateTimeField(default=django.utils.timezone.now),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_indexes, create_indexes),
                postgres_only(forward, reverse),
            ],
        ),
    ]
