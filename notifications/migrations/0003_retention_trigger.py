# Retention (ops/retention.py) is the one sanctioned way journal records leave the database.
# This replaces the append-only trigger of journals_journalrecord (journals/migrations/0002_append_only.py)
# with one that still refuses every UPDATE, and refuses DELETE unless the transaction has set
# `loopx.retention` to 'on' (`SELECT set_config('loopx.retention', 'on', true)`: transaction-local, gone
# at COMMIT or ROLLBACK). Only the retention service sets it. Like the original trigger, it guards against
# application code paths, not against a database superuser (who could drop the trigger).
#
# The other append-only tables (audit trail, evidence, gate decisions) keep the strict trigger:
# retention never deletes them. If a later migration re-installs journals_journalrecord's trigger with
# kernel.appendonly.append_only_trigger_sql, it must come before this one or re-apply FORWARD.
from django.db import migrations

from kernel.dialect import postgres_only

FORWARD = """
CREATE OR REPLACE FUNCTION loopx_refuse_change_except_retention() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('loopx.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = 'append-only table ' || TG_TABLE_NAME || ': ' || TG_OP || ' refused',
        ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS journals_journalrecord_append_only ON journals_journalrecord;
CREATE TRIGGER journals_journalrecord_append_only BEFORE UPDATE OR DELETE ON journals_journalrecord
    FOR EACH ROW EXECUTE FUNCTION loopx_refuse_change_except_retention();
"""

REVERSE = """
DROP TRIGGER IF EXISTS journals_journalrecord_append_only ON journals_journalrecord;
CREATE TRIGGER journals_journalrecord_append_only BEFORE UPDATE OR DELETE ON journals_journalrecord
    FOR EACH ROW EXECUTE FUNCTION loopx_refuse_change();
DROP FUNCTION IF EXISTS loopx_refuse_change_except_retention();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0002_schedules_roles"),
        ("journals", "0002_append_only"),
    ]

    operations = [postgres_only(FORWARD, REVERSE)]
