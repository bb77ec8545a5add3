"""Every assessed turn gets its stored effective state (journals.TurnEffective), computed by the one rule.

It runs today's rule (recovery.state.turn_states_refresh) rather than a frozen copy: a rule kept twice
could disagree, and a new database has no run to fill.
"""

from django.db import migrations


def fill(apps, schema_editor):  # noqa: ANN001, ANN201
    Run = apps.get_model("journals", "Run")
    if not Run.objects.filter(assessed_seq__isnull=False).exists():
        return
    from journals.models import Run as LiveRun
    from recovery.state import turn_states_refresh

    for run in LiveRun.objects.filter(assessed_seq__isnull=False).iterator(chunk_size=200):
        turn_states_refresh(run=run)


class Migration(migrations.Migration):
    # After every schema change of the models the rule reads (it runs today's code on today's tables).
    dependencies = [
        ("journals", "0006_turn_effective"),
        ("recovery", "0008_history_imports_effect_maps"),
        ("audits", "0010_operatoraction_history_team"),
    ]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
