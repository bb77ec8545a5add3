"""Imported runs in their source's own words: the run's source ids, each intent's source ids, and each turn's
name and source ids (an append-only table, its trigger on PostgreSQL)."""

import django.db.models.deletion
from django.db import migrations, models

from kernel.appendonly import install_append_only_triggers


class Migration(migrations.Migration):

    dependencies = [
        ('recovery', '0014_dbos_import_system'),
    ]

    operations = [
        migrations.AddField(
            model_name='importedintent',
            name='original',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name='importedrun',
            name='origin',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.CreateModel(
            name='ImportedTurn',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('turn', models.CharField(max_length=200)),
                ('name', models.CharField(blank=True, default='', max_length=200)),
                ('original', models.JSONField(blank=True, default=dict)),
                ('imported_run', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='turns', to='recovery.importedrun')),
            ],
            options={
                'ordering': ['imported_run', 'turn'],
                'constraints': [models.UniqueConstraint(fields=('imported_run', 'turn'), name='importedturn_unique')],
            },
        ),
        install_append_only_triggers(["recovery_importedturn"]),
    ]
