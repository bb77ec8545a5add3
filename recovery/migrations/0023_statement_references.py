# An assessment's TurnAssessment and OutputEntry rows: their foreign keys kept on PostgreSQL by triggers that
# check each statement instead of FOREIGN KEY constraints that check each row at COMMIT, as journals 0017
# does for a turn's rows (kernel/references.py says how and why). SQLite keeps its constraints.
import django.db.models.deletion
from django.db import migrations, models

from kernel.references import statement_references

REFERENCES = [
    ("recovery_turnassessment", "assessment_id", "recovery_assessment"),
    ("recovery_turnassessment", "turn_id", "journals_turn"),
    ("recovery_outputentry", "assessment_id", "recovery_assessment"),
    ("recovery_outputentry", "run_id", "journals_run"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("journals", "0017_statement_references"),
        ("recovery", "0022_snapshot_parts"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="outputentry",
                    name="assessment",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="entries",
                        to="recovery.assessment",
                    ),
                ),
                migrations.AlterField(
                    model_name="outputentry",
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
                    model_name="turnassessment",
                    name="assessment",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="turn_rows",
                        to="recovery.assessment",
                    ),
                ),
                migrations.AlterField(
                    model_name="turnassessment",
                    name="turn",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="assessments",
                        to="journals.turn",
                    ),
                ),
            ],
            database_operations=[statement_references(REFERENCES)],
        ),
    ]
