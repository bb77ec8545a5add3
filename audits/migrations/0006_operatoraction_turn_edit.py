# The console's admin edits of a blocked turn are recorded as OperatorAction kind `turn_edit`.
from django.db import migrations, models

KINDS = (
    "turn_approve",
    "turn_block",
    "turn_park",
    "evidence_record",
    "api_token_create",
    "api_token_revoke",
    "finding_acknowledge",
    "finding_resolve",
    "turn_edit",
)


class Migration(migrations.Migration):
    dependencies = [("audits", "0005_beat_schedules")]

    operations = [
        migrations.RemoveConstraint(model_name="operatoraction", name="operatoraction_kind_valid"),
        migrations.AlterField(
            model_name="operatoraction",
            name="kind",
            field=models.CharField(choices=[(k, k.replace("_", " ")) for k in KINDS], max_length=32),
        ),
        migrations.AddConstraint(
            model_name="operatoraction",
            constraint=models.CheckConstraint(condition=models.Q(("kind__in", KINDS)), name="operatoraction_kind_valid"),
        ),
    ]
