"""Every assessed run gets its stored status (journals.Run.status), decided by the one rule.

Like 0009, it runs today's rule (recovery.state.run_status_refresh) rather than a frozen copy, and a new
database has no run to fill. A run never assessed keeps the column's default, running.
"""

from django.db import migrations


def fill(apps, schema_editor):  # noqa: ANN001, ANN201
    Run = apps.get_model("journals", "Run")
    if not Run.objects.filter(assessed_seq__isnull=False).exists():
        return
    from journals.models import Run as LiveRun
    from recovery.state import run_status_refresh

    for run in LiveRun.objects.filter(assessed_seq__isnull=False).iterator(chunk_size=200):
        run_status_refresh(run=run)


class Migration(migrations.Migration):
    # After every schema change of the models the rule reads (it runs today's code on today's tables).
    dependencies = [
        ("journals", "0013_run_status_run_status"),
        ("recovery", "0015_imported_words_imports_pics"),
    ]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
