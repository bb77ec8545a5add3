# A run's fold snapshot is rewritten every LOOPX_SNAPSHOT_EVERY_RECORDS records and grows with its turns
# (megabytes for a long run): compressed with lz4 rather than PostgreSQL's default pglz (kernel.dialect).
from django.db import migrations

from kernel.dialect import lz4_compressed


class Migration(migrations.Migration):
    dependencies = [("recovery", "0019_bounded_output")]

    operations = [lz4_compressed("recovery_foldsnapshot", "data")]
