# PostgreSQL: trigram indexes for the turns list's search (recovery.state.turns_matching's ``q``: a turn id,
# lineage or run id that contains the words, any case). Django's icontains is UPPER(column) LIKE
# UPPER('%words%'), which a b-tree cannot serve: without these, every search reads every turn, and costs
# ten times more at ten times the turns. A GIN index of the upper-cased column's trigrams serves it
# (pg_trgm, a trusted extension: the database's owner may create it). Search words under three characters
# have no trigram and still read every turn.
#
# Built CONCURRENTLY, outside a transaction (atomic = False), one statement at a time: writes to the turns
# go on while a large table is indexed. SQLite has no pg_trgm: there the search reads the table, as before.
from django.db import migrations

from kernel.dialect import postgres_only

INDEXES = {
    "turn_turn_id_trgm": "journals_turn USING gin (upper(turn_id::text) gin_trgm_ops)",
    "turn_lineage_trgm": "journals_turn USING gin (upper(lineage::text) gin_trgm_ops)",
    "run_run_id_trgm": "journals_run USING gin (upper(run_id::text) gin_trgm_ops)",
}


def forward(apps, schema_editor):
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, target in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {target}")


def reverse(apps, schema_editor):
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("journals", "0014_run_changed_at")]

    operations = [postgres_only(forward, reverse)]
