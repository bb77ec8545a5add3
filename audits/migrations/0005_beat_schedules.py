# The scheduled audits as django-celery-beat rows, so that an administrator can change their
# interval, pause them or run one now from the admin; beat (DatabaseScheduler) reads them from here.
# Also gives the roles of 0003_roles their permissions on the new models (viewers see findings and
# heartbeats; administrators also manage the schedules).
from django.contrib.auth.management import create_permissions
from django.db import migrations

# name -> (task, every N seconds, what it does)
SCHEDULES = {
    "audit: assessment sweep": (
        "audits.tasks.audit_assessment_sweep",
        30,
        "Runs whose ingest committed but whose assessment was never enqueued (or whose task was lost) are assessed.",
    ),
    "audit: stale turns": (
        "audits.tasks.audit_stale_turns",
        60,
        "Unfinished turns with no record for LOOPX_STALE_TURN_SECONDS: re-assess and open a lost_turn finding.",
    ),
    "audit: chain verification": (
        "audits.tasks.audit_chain_verification",
        300,
        "Re-verify stored records (digests, prev chain, lsn continuity) from each run's cursor.",
    ),
    "audit: unclaimed blocked turns": (
        "audits.tasks.audit_unclaimed_blocked_turns",
        300,
        "Blocked turns nobody acted on for LOOPX_BLOCKED_ESCALATION_SECONDS: an escalation finding with the age.",
    ),
    "audit: engine change": (
        "audits.tasks.audit_engine_change",
        600,
        "Runs whose latest assessment was made by another engine or projection version are re-assessed.",
    ),
}
APPS = ("audits", "recovery", "django_celery_beat")
VIEWER_MODELS = ("finding", "heartbeat", "chaincursor", "pendingassessment")


def create_schedules(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, (task, seconds, description) in SCHEDULES.items():
        interval, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
        PeriodicTask.objects.get_or_create(
            name=name, defaults={"task": task, "interval": interval, "description": description, "enabled": True}
        )
    # Beat notices changes through this row (django-celery-beat's own change tracking).
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    from django.utils import timezone

    PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def drop_schedules(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name__in=list(SCHEDULES)).delete()


def grant_permissions(apps, schema_editor):
    for app_config in apps.get_app_configs():
        if app_config.label in APPS:
            app_config.models_module = True
            create_permissions(app_config, apps=apps, verbosity=0)
            app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    view = list(
        Permission.objects.filter(
            content_type__app_label__in=("audits", "recovery"), codename__in=[f"view_{m}" for m in VIEWER_MODELS]
        )
    )
    for name in ("viewer", "operator"):
        group = Group.objects.filter(name=name).first()
        if group is not None:
            group.permissions.add(*view)
    admin = Group.objects.filter(name="admin").first()
    if admin is not None:
        admin.permissions.add(*Permission.objects.filter(content_type__app_label__in=APPS))


def noop(apps, schema_editor):
    pass


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0004_findings_heartbeats_chain_cursor"),
        ("recovery", "0003_pending_assessment"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.RunPython(create_schedules, drop_schedules),
        migrations.RunPython(grant_permissions, noop),
    ]
