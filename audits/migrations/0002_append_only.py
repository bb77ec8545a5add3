# The audit trail is append-only down to the database (kernel/appendonly.py).
from django.db import migrations

from kernel.appendonly import install_append_only_triggers


class Migration(migrations.Migration):
    dependencies = [("audits", "0001_initial")]

    operations = [
        install_append_only_triggers(
            [
                "audits_operatoraction",
                "audits_recoveryaudit",
                "audits_recoveryauditaction",
                "audits_recoverydivergence",
                "audits_recoveryauditclosure",
            ]
        )
    ]
