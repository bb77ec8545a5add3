# The three roles of journals/access.py as groups. Permissions are created here (they normally appear
# only after all migrations, in post_migrate) so that a fresh database gets populated groups at once.
from django.contrib.auth.management import create_permissions
from django.db import migrations

APPS = ("journals", "recovery", "audits")
# Models an operator writes through the services (approve, block, evidence); everything else they view.
OPERATOR_ADDS = {"recovery": ("operatorevidence", "gatedecision"), "audits": ("operatoraction",)}


def create_roles(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ours = Permission.objects.filter(content_type__app_label__in=APPS)
    view = list(ours.filter(codename__startswith="view_").exclude(codename="view_apitoken"))
    operator_adds = [
        p
        for p in ours.filter(codename__startswith="add_")
        if p.codename[4:] in OPERATOR_ADDS.get(p.content_type.app_label, ())
    ]
    admin = list(ours) + list(
        Permission.objects.filter(content_type__app_label="auth", codename__in=["view_user", "change_user", "view_group"])
    )
    for name, perms in (("viewer", view), ("operator", view + operator_adds), ("admin", admin)):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(perms)


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["viewer", "operator", "admin"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("journals", "0002_append_only"),
        ("recovery", "0002_append_only"),
        ("audits", "0002_append_only"),
    ]

    operations = [migrations.RunPython(create_roles, drop_roles)]
