# A turn's run is a real FOREIGN KEY constraint again on PostgreSQL, as it has always been on SQLite: 0005
# had replaced it with triggers (a statement's inserts checked at once, a row's move of run checked alone),
# for about 0.8 ms per 100 planned turns at COMMIT. Side by side with the triggers, ingest through the API
# keeps its ratio to raw COPY with the constraint (docs/perf/2026-12-02-dialect.md), and a constraint is the
# database's own. The triggers and their functions go first, then the constraint comes back, DEFERRABLE
# INITIALLY DEFERRED as Django declares every foreign key (checked at COMMIT). The turn keeps no index of its
# own on run_id (turn_unique_per_run and turn_run_updated_id lead with it). On the way back the triggers
# return.
#
# A journal record's run stays checked by 0004's triggers: with its constraint back, the check of 1,000
# records a batch at COMMIT cost ingest a sixth of its ratio to raw COPY, below its target.
import importlib

import django.db.models.deletion
from django.db import migrations, models

from kernel.dialect import postgres_only

_TURNS = importlib.import_module("journals.migrations.0005_turn_run_statement_check")


class Migration(migrations.Migration):
    dependencies = [("journals", "0006_turn_effective")]

    operations = [
        postgres_only(_TURNS.REVERSE_TRIGGERS, _TURNS.FORWARD),
        migrations.AlterField(
            model_name="turn",
            name="run",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="turns", to="journals.run"
            ),
        ),
    ]
