# PostgreSQL: the foreign key journals_journalrecord.run_id -> journals_run.id is kept by two triggers
# instead of a FOREIGN KEY constraint, because the constraint checks every row on its own: at COMMIT, one
# lookup of the run per record, though a batch's records nearly always share one run (docs/api.md,
# "Performance"). The same invariant, checked per statement and per run:
#
# - insert side (journals_journalrecord_run_exists, AFTER INSERT and AFTER UPDATE, FOR EACH STATEMENT over
#   the statement's transition table): every distinct run_id the statement wrote must be a run, and that run
#   row is locked FOR KEY SHARE, as the constraint's own check locks it, so that a concurrent DELETE of the
#   run (or change of its id) waits for this transaction and then sees its records. Raised as
#   foreign_key_violation (23503, psycopg's ForeignKeyViolation, Django's IntegrityError) at the end of the
#   statement; the constraint was DEFERRABLE INITIALLY DEFERRED and checked at COMMIT, which only matters to
#   a transaction that writes a record before its run: no code path does (a record needs its run's pk,
#   which exists once the run row does).
# - delete side (journals_run_keeps_records, a constraint trigger AFTER DELETE OR UPDATE OF id on
#   journals_run, DEFERRABLE INITIALLY DEFERRED as the constraint was): at COMMIT, a run id that no longer
#   exists must have no record. Like the constraint's NO ACTION check it reads with a fresh snapshot, which
#   is READ COMMITTED's, the isolation level of this project (Django's default; nothing sets another).
#
# TRUNCATE journals_run stays refused by the other foreign keys on it (branches, turns, ...).
# tests/store/test_store.py proves each case on PostgreSQL, and that the constraint is gone (so that the
# triggers, not the constraint, are what the tests see). SQLite keeps its FOREIGN KEY: the model's state
# says db_constraint=False (the truth on PostgreSQL), but this migration leaves SQLite's table as it is.
import django.db.models.deletion
from django.db import migrations, models

from kernel.dialect import postgres_only

FORWARD = """
CREATE OR REPLACE FUNCTION loopx_journalrecord_run_exists() RETURNS trigger AS $$
DECLARE
    runs bigint[];
    found integer;
BEGIN
    SELECT array_agg(DISTINCT run_id) INTO runs FROM written;
    SELECT count(*) INTO found FROM (SELECT 1 FROM journals_run WHERE id = ANY (runs) FOR KEY SHARE) AS locked;
    IF found < coalesce(cardinality(runs), 0) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'journals_journalrecord_run_exists',
            MESSAGE = 'insert or update on table "journals_journalrecord" violates foreign key'
                || ' journals_journalrecord.run_id -> journals_run.id',
            DETAIL = 'A run_id of the statement is not present in table "journals_run".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER journals_journalrecord_run_exists AFTER INSERT ON journals_journalrecord
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION loopx_journalrecord_run_exists();
CREATE TRIGGER journals_journalrecord_run_exists_upd AFTER UPDATE ON journals_journalrecord
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION loopx_journalrecord_run_exists();

CREATE OR REPLACE FUNCTION loopx_run_keeps_records() RETURNS trigger AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM journals_run WHERE id = OLD.id)
            AND EXISTS (SELECT 1 FROM journals_journalrecord WHERE run_id = OLD.id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'journals_run_keeps_records',
            MESSAGE = 'update or delete on table "journals_run" violates foreign key'
                || ' journals_journalrecord.run_id -> journals_run.id',
            DETAIL = 'Key (id)=(' || OLD.id || ') is still referenced from table "journals_journalrecord".';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER journals_run_keeps_records AFTER DELETE OR UPDATE OF id ON journals_run
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION loopx_run_keeps_records();
"""

REVERSE_TRIGGERS = """
DROP TRIGGER IF EXISTS journals_run_keeps_records ON journals_run;
DROP TRIGGER IF EXISTS journals_journalrecord_run_exists_upd ON journals_journalrecord;
DROP TRIGGER IF EXISTS journals_journalrecord_run_exists ON journals_journalrecord;
DROP FUNCTION IF EXISTS loopx_run_keeps_records();
DROP FUNCTION IF EXISTS loopx_journalrecord_run_exists();
"""

# The constraint as 0001_initial created it (Django's name for it), for the way back.
CONSTRAINT = "journals_journalrecord_run_id_8ec9d687_fk_journals_run_id"
REVERSE_CONSTRAINT = f"""
ALTER TABLE journals_journalrecord ADD CONSTRAINT {CONSTRAINT}
    FOREIGN KEY (run_id) REFERENCES journals_run (id) DEFERRABLE INITIALLY DEFERRED;
"""


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid = 'journals_journalrecord'::regclass AND confrelid = 'journals_run'::regclass"
        )
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        schema_editor.execute(f'ALTER TABLE journals_journalrecord DROP CONSTRAINT "{name}"')
    schema_editor.execute(FORWARD)


def reverse(apps, schema_editor):
    schema_editor.execute(REVERSE_TRIGGERS)
    schema_editor.execute(REVERSE_CONSTRAINT)


class Migration(migrations.Migration):
    dependencies = [("journals", "0003_turn_run_updated_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="journalrecord",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="records",
                        to="journals.run",
                    ),
                ),
            ],
            database_operations=[postgres_only(forward, reverse)],
        ),
    ]
