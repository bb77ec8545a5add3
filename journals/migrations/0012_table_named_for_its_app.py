# The pending-assessment flag is the journal store's: its table takes the store's name (it was made by the
# recovery app, as recovery_pendingassessment).
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("journals", "0011_pending_assessment_lease")]

    operations = [migrations.AlterModelTable(name="pendingassessment", table=None)]
