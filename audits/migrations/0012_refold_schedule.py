# The re-fold audit's beat row: a sample of runs (LOOPX_REFOLD_AUDIT_SAMPLE) folded again whole and compared
# with the assessment each run shows; a difference is an `assessment_diverged` finding (docs/celery.md).

from django.db import migrations
from django.utils import timezone

SCHEDULE = (
    "audit: re-fold",
    "audits.tasks.audit_refold",
    900,
    "A sample of runs folded again whole and compared with their stored assessment: assessment_diverged.",
)


def create_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    name, task, seconds, description = SCHEDULE
    interval, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=name, defaults={"task": task, "interval": interval, "description": description, "enabled": True}
    )
    apps.get_model("django_celery_beat", "PeriodicTasks").objects.update_or_create(
        ident=1, defaults={"last_update": timezone.now()}
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=SCHEDULE[0]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0011_models_moved_out"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, drop_schedule)]
