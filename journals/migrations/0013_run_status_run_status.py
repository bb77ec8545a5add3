"""A run's status (journals.RunStatus), stored on the run: running until recovery's backfill
(recovery 0016) and then each refresh of its turns' states decide it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("journals", "0012_table_named_for_its_app")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("blocked", "blocked: the journal is at fault"),
                    ("needs_attention", "needs attention"),
                    ("running", "running"),
                    ("done", "done"),
                ],
                default="running",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["status", "-updated_at", "-id"], name="run_status_updated"),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["blocked", "needs_attention", "running", "done"])),
                name="run_status_valid",
            ),
        ),
    ]
