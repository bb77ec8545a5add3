# The foreign keys of the rows an assessment writes for each batch (a turn's Phase, Intent and TurnEffective
# rows) are kept on PostgreSQL by triggers that check each statement instead of FOREIGN KEY constraints that
# check each row at COMMIT (kernel/references.py says how and why; recovery 0023 does the same for the
# assessment's own rows). SQLite keeps its constraints: the state says db_constraint=False, the truth on
# PostgreSQL. tests/store/test_statement_references.py proves each side of each key on PostgreSQL.
#
# Intent's single-column index on turn_id goes too, on both databases (by DROP INDEX: an AlterField on
# SQLite would rebuild the table without its FOREIGN KEY): intent_unique_per_turn (turn_id, intent_id) leads
# with it and serves every read by turn and the delete side's check.
import django.db.models.deletion
from django.db import migrations, models

from kernel.references import statement_references

REFERENCES = [
    ("journals_phase", "turn_id", "journals_turn"),
    ("journals_phase", "record_id", "journals_journalrecord"),
    ("journals_intent", "turn_id", "journals_turn"),
    ("journals_turneffective", "turn_id", "journals_turn"),
    ("journals_turneffective", "run_id", "journals_run"),
]
INTENT_TURN_INDEX = "journals_intent_turn_id_1c52876a"  # Django's name for it, the same on both databases


def drop_intent_turn_index(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "journals_intent")
    for name, c in sorted(constraints.items()):
        if c["index"] and not c["unique"] and not c["primary_key"] and c["columns"] == ["turn_id"]:
            schema_editor.execute(f'DROP INDEX "{name}"')


def create_intent_turn_index(apps, schema_editor):
    schema_editor.execute(f'CREATE INDEX "{INTENT_TURN_INDEX}" ON journals_intent ("turn_id")')


class Migration(migrations.Migration):
    dependencies = [("journals", "0016_redundant_fk_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="intent",
                    name="turn",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="intents",
                        to="journals.turn",
                    ),
                ),
                migrations.AlterField(
                    model_name="phase",
                    name="record",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="journals.journalrecord",
                    ),
                ),
                migrations.AlterField(
                    model_name="phase",
                    name="turn",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="phases",
                        to="journals.turn",
                    ),
                ),
                migrations.AlterField(
                    model_name="turneffective",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="journals.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="turneffective",
                    name="turn",
                    field=models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="effective",
                        serialize=False,
                        to="journals.turn",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_intent_turn_index, create_intent_turn_index),
                statement_references(REFERENCES, drop_functions=True),
            ],
        ),
    ]
