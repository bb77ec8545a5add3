# An Intent row's outcome is the engine's merged readback of the intent's latest dispatch, and that may be
# `conflicting` (a `succeeded` and a `failed` readback of the same dispatch: not settled). The column refused
# it, so a journal with such readbacks, valid under the contract, failed its assessment at the store.
#
# The check constraint is replaced by hand on each database. Django would rebuild the SQLite table from the
# model's state, which says db_constraint=False for the turn (migration 0017: PostgreSQL keeps that key by
# triggers), and the rebuilt table would lose the FOREIGN KEY that SQLite keeps. So on SQLite the table is
# rebuilt here from its own CREATE statement, only the check's text changed; on PostgreSQL the constraint
# is dropped and added again in place.
from django.db import migrations, models

TABLE = "journals_intent"
NAME = "intent_outcome_valid"
OLD = ("succeeded", "failed", "unknown")
NEW = ("succeeded", "failed", "unknown", "conflicting")


def _check_sql(outcomes: tuple[str, ...]) -> str:
    listed = ", ".join(f"'{o}'" for o in outcomes)
    return f'("outcome" IN ({listed}) OR "outcome" IS NULL)'


def _constraint(outcomes: tuple[str, ...]) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=models.Q(outcome__in=outcomes) | models.Q(outcome__isnull=True), name=NAME
    )


def _replace(apps, schema_editor, before: tuple[str, ...], after: tuple[str, ...]) -> None:
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        model = apps.get_model("journals", "Intent")
        schema_editor.remove_constraint(model, _constraint(before))
        schema_editor.add_constraint(model, _constraint(after))
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [TABLE])
        (create,) = cursor.fetchone()
    old = f'CONSTRAINT "{NAME}" CHECK ({_check_sql(before)})'
    if create.count(old) != 1:
        raise RuntimeError(f"{TABLE}: the check {NAME} is not the one this migration replaces")
    rebuilt = create.replace(old, f'CONSTRAINT "{NAME}" CHECK ({_check_sql(after)})').replace(
        f'CREATE TABLE "{TABLE}"', f'CREATE TABLE "{TABLE}__new"', 1
    )
    # Django's own way of changing a SQLite table (its schema editor runs with the foreign keys' checks off):
    # the new table, the rows copied, the old one dropped, the new one renamed.
    schema_editor.execute(rebuilt)
    schema_editor.execute(f'INSERT INTO "{TABLE}__new" SELECT * FROM "{TABLE}"')
    schema_editor.execute(f'DROP TABLE "{TABLE}"')
    schema_editor.execute(f'ALTER TABLE "{TABLE}__new" RENAME TO "{TABLE}"')


def forward(apps, schema_editor):
    _replace(apps, schema_editor, OLD, NEW)


def backward(apps, schema_editor):
    _replace(apps, schema_editor, NEW, OLD)  # refused by the database while a row holds `conflicting`


class Migration(migrations.Migration):
    dependencies = [
        ("journals", "0017_statement_references"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="intent", name=NAME),
                migrations.AlterField(
                    model_name="intent",
                    name="outcome",
                    field=models.CharField(
                        blank=True,
                        choices=[(o, o) for o in NEW],
                        max_length=16,
                        null=True,
                    ),
                ),
                migrations.AddConstraint(model_name="intent", constraint=_constraint(NEW)),
            ],
            database_operations=[migrations.RunPython(forward, backward)],
        ),
    ]
