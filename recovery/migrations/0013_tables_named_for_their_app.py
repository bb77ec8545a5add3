# Findings and recovery audits are the recovery app's: their tables take its name (they were made by the audits
# app). The append-only triggers of the recovery audit tables follow their tables' names.
from django.db import migrations

from kernel.appendonly import rename_append_only_trigger

AUDIT_TABLES = ["recoveryaudit", "recoveryauditaction", "recoveryauditclosure", "recoverydivergence"]


class Migration(migrations.Migration):
    dependencies = [("recovery", "0012_turnassignment")]

    operations = [
        migrations.AlterModelTable(name="finding", table=None),
        *(migrations.AlterModelTable(name=name, table=None) for name in AUDIT_TABLES),
        *(rename_append_only_trigger(f"audits_{name}", f"recovery_{name}") for name in AUDIT_TABLES),
    ]
