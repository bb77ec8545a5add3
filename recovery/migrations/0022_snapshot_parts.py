# A run's fold snapshot is a small manifest (recovery_foldsnapshot.data) and parts of about a thousand turns
# each (engine/parts.py): a new snapshot writes only the parts whose digest changed, compressed with lz4 on
# PostgreSQL as 0020 does for the snapshot (kernel.dialect).
import django.db.models.deletion
from django.db import migrations, models

from kernel.dialect import lz4_compressed


class Migration(migrations.Migration):
    dependencies = [
        ("journals", "0015_turn_search_trigram"),
        ("recovery", "0021_redundant_fk_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="SnapshotPart",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.IntegerField()),
                ("digest", models.CharField(max_length=64)),
                ("data", models.BinaryField()),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="snapshot_parts",
                        to="journals.run",
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("run", "number"), name="snapshot_part_unique_number")],
            },
        ),
        lz4_compressed("recovery_snapshotpart", "data"),
    ]
