"""The pending-assessment flag went to journals (journals 0008 took its table over in Django's state)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('journals', '0008_pending_assessment_flag'),
        ('recovery', '0010_findings_and_recovery_audits'),
    ]

    operations = [
        # The table already exists under its recovery_ name: only Django's state moves.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='PendingAssessment',
                ),
            ],
            database_operations=[],
        ),
    ]
