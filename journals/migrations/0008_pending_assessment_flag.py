"""The pending-assessment flag moves from recovery into journals, whose intake raises it. Only Django's state
moves; the table keeps its name, and the content type follows the model."""

import django.db.models.deletion
from django.db import migrations, models

from kernel.contenttypes import content_types_relabel


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('recovery', '0010_findings_and_recovery_audits'),
        ('journals', '0007_turn_run_foreign_key'),
        ('journals', '0006_turn_effective'),
    ]

    operations = [
        # The table already exists under its recovery_ name: only Django's state moves.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='PendingAssessment',
                    fields=[
                        ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='pending_assessment', serialize=False, to='journals.run')),
                        ('pending', models.BooleanField(default=False)),
                        ('requested_at', models.DateTimeField(blank=True, null=True)),
                        ('requested_seq', models.BigIntegerField(default=0)),
                        ('enqueued_at', models.DateTimeField(blank=True, null=True)),
                        ('enqueues', models.BigIntegerField(default=0)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('outcome', models.CharField(blank=True, default='', max_length=16)),
                    ],
                    options={
                        'db_table': 'recovery_pendingassessment',
                        'indexes': [models.Index(fields=['pending', 'requested_at'], name='pendingassessment_sweep')],
                        'constraints': [models.CheckConstraint(condition=models.Q(('outcome__in', ('', 'stored', 'unchanged', 'superseded', 'missing'))), name='pendingassessment_outcome_valid')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_relabel("recovery", "journals", ('pendingassessment',)),
            content_types_relabel("journals", "recovery", ('pendingassessment',)),
        ),
    ]
