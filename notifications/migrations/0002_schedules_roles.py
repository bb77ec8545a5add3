# Beat rows for the notification sweep and the retention sweep (django-celery-beat's DatabaseScheduler
# reads them; administrators can pause or retime them in the admin), and the roles' permissions on the
# notification models: viewers read deliveries, operators also resend them (change), admins manage
# webhooks. The retention task runs hourly but does nothing while LOOPX_RETENTION_DAYS is 0 (the default).
from django.contrib.auth.management import create_permissions
from django.db import migrations
from django.utils import timezone

SCHEDULES = {
    "notifications: deliver due webhooks": (
        "notifications.deliver_due",
        60,
        "Publishes webhook deliveries that are due (retries, and any whose publish failed while the broker was down).",
    ),
    "ops: retention sweep": (
        "ops.retention_sweep",
        3600,
        "Exports completed runs older than LOOPX_RETENTION_DAYS to verified packages, then removes them. Off while 0.",
    ),
}
VIEW = ("view_webhookdelivery", "view_webhookattempt")


def create_schedules(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, (task, seconds, description) in SCHEDULES.items():
        interval, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
        PeriodicTask.objects.get_or_create(
            name=name, defaults={"task": task, "interval": interval, "description": description, "enabled": True}
        )
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def drop_schedules(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name__in=list(SCHEDULES)).delete()


def grant_permissions(apps, schema_editor):
    config = apps.get_app_config("notifications")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ours = Permission.objects.filter(content_type__app_label="notifications")
    grants = {
        "viewer": list(ours.filter(codename__in=VIEW)),
        "operator": list(ours.filter(codename__in=(*VIEW, "change_webhookdelivery"))),
        "admin": list(ours),
    }
    for name, perms in grants.items():
        group = Group.objects.filter(name=name).first()
        if group is not None:
            group.permissions.add(*perms)


def noop(apps, schema_editor):
    pass


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0001_initial"),
        ("audits", "0003_roles"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.RunPython(create_schedules, drop_schedules),
        migrations.RunPython(grant_permissions, noop),
    ]
