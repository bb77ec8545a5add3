"""The team that sees every run (prefix ""), with every person who held a role before teams existed: until
then every role saw every run, and an upgrade must not take that away. People added later join a team."""

from django.db import migrations

ROLES = ("viewer", "operator", "admin")


def forwards(apps, schema_editor):
    Team = apps.get_model("teams", "Team")
    TeamPrefix = apps.get_model("teams", "TeamPrefix")
    User = apps.get_model("auth", "User")
    team, _ = Team.objects.get_or_create(name="all-runs")
    TeamPrefix.objects.get_or_create(team=team, prefix="")
    team.members.add(*User.objects.filter(groups__name__in=ROLES).distinct())


class Migration(migrations.Migration):
    dependencies = [("teams", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
