"""A turn's and a run's last change include the people's acts on them (journals/changes.py): existing turns
and runs take their latest operator decision, assignment and journal repair."""

from typing import Any

from django.db import migrations
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Greatest


def _latest(model: Any, field: str, **match: Any) -> Any:
    rows = model.objects.filter(**match).order_by(f"-{field}").values(field)[:1]
    return Subquery(rows)


def fill(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("journals", "Run")
    Turn = apps.get_model("journals", "Turn")
    GateDecision = apps.get_model("recovery", "GateDecision")
    TurnAssignment = apps.get_model("recovery", "TurnAssignment")
    JournalRepair = apps.get_model("recovery", "JournalRepair")
    acted = Q(Exists(GateDecision.objects.filter(turn=OuterRef("pk")))) | Q(
        Exists(TurnAssignment.objects.filter(turn=OuterRef("pk")))
    )
    Turn.objects.filter(acted).update(
        updated_at=Greatest(
            F("updated_at"),
            Coalesce(_latest(GateDecision, "created_at", turn=OuterRef("pk")), F("updated_at")),
            Coalesce(_latest(TurnAssignment, "assigned_at", turn=OuterRef("pk")), F("updated_at")),
        )
    )
    Run.objects.update(
        changed_at=Greatest(
            F("changed_at"),
            Coalesce(_latest(GateDecision, "created_at", run=OuterRef("pk")), F("changed_at")),
            Coalesce(_latest(TurnAssignment, "assigned_at", turn__run=OuterRef("pk")), F("changed_at")),
            Coalesce(_latest(JournalRepair, "created_at", run=OuterRef("pk")), F("changed_at")),
        )
    )


class Migration(migrations.Migration):
    dependencies = [
        ("journals", "0014_run_changed_at"),
        ("recovery", "0016_run_status_backfill_run_status"),
    ]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
