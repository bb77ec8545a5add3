# A run's fold snapshot is rewritten whole every LOOPX_SNAPSHOT_EVERY_RECORDS records and grows with its
# turns (megabytes for a long run). PostgreSQL compresses such a value with pglz by default; lz4 wrote a
# snapshot-sized value about twice as fast for about a third more bytes on disk
# (docs/perf/2026-12-06-growth-flat.md). A server built without lz4 keeps pglz: same bytes read back.
from django.db import migrations

from kernel.dialect import postgres_only

FORWARD = """
DO $$
BEGIN
    ALTER TABLE recovery_foldsnapshot ALTER COLUMN data SET COMPRESSION lz4;
EXCEPTION WHEN others THEN
    RAISE NOTICE USING MESSAGE = 'recovery_foldsnapshot.data keeps the default compression: ' || SQLERRM;
END
$$;
"""
REVERSE = "ALTER TABLE recovery_foldsnapshot ALTER COLUMN data SET COMPRESSION default"


class Migration(migrations.Migration):
    dependencies = [("recovery", "0019_bounded_output")]

    operations = [postgres_only(FORWARD, REVERSE)]
