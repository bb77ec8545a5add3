"""A run's latest change (journals/changes.py), beside its latest batch of records. Existing runs start from
their latest batch; recovery's migration 0017 adds the decisions, assignments and repairs made since."""

from typing import Any

import django.utils.timezone
from django.db import migrations, models
from django.db.models import F


def _from_records(apps: Any, schema_editor: Any) -> None:
    apps.get_model("journals", "Run").objects.update(changed_at=F("updated_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("journals", "0013_run_status_run_status"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="changed_at",
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.RunPython(_from_records, migrations.RunPython.noop),
    ]
