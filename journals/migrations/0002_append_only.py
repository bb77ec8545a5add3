# Append-only evidence: on PostgreSQL a trigger refuses UPDATE and DELETE of journal records
# (kernel/appendonly.py explains the layers).
from django.db import migrations

from kernel.appendonly import install_append_only_triggers


class Migration(migrations.Migration):
    dependencies = [("journals", "0001_initial")]

    operations = [install_append_only_triggers(["journals_journalrecord"])]
