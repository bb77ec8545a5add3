# The beat row of the team channels' sweep (notifications.sweep_notices): escalations, resolves a lost
# signal missed, and the daily digests. django-celery-beat's DatabaseScheduler reads it; administrators can
# pause or retime it in the admin.
from django.db import migrations
from django.utils import timezone

NAME = "notifications: sweep team notices"
TASK = "notifications.sweep_notices"
SECONDS = 60
DESCRIPTION = "Escalates held turns past their rule's threshold, resolves holds that ended, sends daily digests."


def create_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=SECONDS, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=NAME, defaults={"task": TASK, "interval": interval, "description": DESCRIPTION, "enabled": True}
    )
    apps.get_model("django_celery_beat", "PeriodicTasks").objects.update_or_create(
        ident=1, defaults={"last_update": timezone.now()}
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0005_team_channels"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, drop_schedule)]
