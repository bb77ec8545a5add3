# Operator evidence and gate decisions are the record of what people decided: never rewritten.
from django.db import migrations

from kernel.appendonly import install_append_only_triggers


class Migration(migrations.Migration):
    dependencies = [("recovery", "0001_initial")]

    operations = [install_append_only_triggers(["recovery_operatorevidence", "recovery_gatedecision"])]
