# A journal record's run and a turn's run are real FOREIGN KEY constraints again on PostgreSQL, as they have
# always been on SQLite. 0004 and 0005 had replaced them with triggers checking each statement instead of
# each row; side by side with the triggers, ingest through the API keeps its speed target without them
# (docs/perf/2026-12-02-dialect.md), and a constraint is the database's own, plain to read and to trust.
# The triggers and their functions go first, then the constraints come back, DEFERRABLE INITIALLY DEFERRED
# as Django declares every foreign key (checked at COMMIT). Turn keeps no index of its own on run_id
# (turn_unique_per_run and turn_run_updated_id lead with it). On the way back the triggers return.
import importlib

import django.db.models.deletion
from django.db import migrations, models

from kernel.dialect import postgres_only

_RECORDS = importlib.import_module("journals.migrations.0004_record_run_statement_check")
_TURNS = importlib.import_module("journals.migrations.0005_turn_run_statement_check")


class Migration(migrations.Migration):
    dependencies = [("journals", "0006_turn_effective")]

    operations = [
        postgres_only(_RECORDS.REVERSE_TRIGGERS + _TURNS.REVERSE_TRIGGERS, _RECORDS.FORWARD + _TURNS.FORWARD),
        migrations.AlterField(
            model_name="journalrecord",
            name="run",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="records", to="journals.run"
            ),
        ),
        migrations.AlterField(
            model_name="turn",
            name="run",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="turns", to="journals.run"
            ),
        ),
    ]
