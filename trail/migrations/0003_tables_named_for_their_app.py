# The trail's tables take the trail's name (they were made by the audits app). The append-only trigger of the
# actions table follows its table's name.
from django.db import migrations

from kernel.appendonly import rename_append_only_trigger


class Migration(migrations.Migration):
    dependencies = [("trail", "0002_turn_assign_kinds")]

    operations = [
        migrations.AlterModelTable(name="operatoraction", table=None),
        migrations.AlterModelTable(name="trailhead", table=None),
        rename_append_only_trigger("audits_operatoraction", "trail_operatoraction"),
    ]
