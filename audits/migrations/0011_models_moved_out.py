"""The operator trail went to the trail app; findings and recovery audits went to recovery. Their tables
stay where they are (trail 0001 and recovery 0010 took them over in Django's state), so here the models
leave the audits app's state only."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0010_operatoraction_history_team"),
        ("trail", "0001_initial"),
        ("recovery", "0010_findings_and_recovery_audits"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="RecoveryDivergence"),
                migrations.DeleteModel(name="RecoveryAuditAction"),
                migrations.DeleteModel(name="RecoveryAuditClosure"),
                migrations.DeleteModel(name="RecoveryAudit"),
                migrations.DeleteModel(name="Finding"),
                migrations.DeleteModel(name="OperatorAction"),
                migrations.DeleteModel(name="TrailHead"),
            ],
            database_operations=[],
        ),
    ]
