from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("journals", "0010_turn_journal_order_index")]

    operations = [
        migrations.AddField(
            model_name="pendingassessment",
            name="lease_expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="pendingassessment",
            name="lease_holder",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddIndex(
            model_name="pendingassessment",
            index=models.Index(fields=["lease_expires_at"], name="pendingassessment_lease"),
        ),
    ]
