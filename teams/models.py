"""Teams: who sees which runs. A team has run-id prefixes and members; a person sees and acts on the runs
whose id starts with one of their teams' prefixes (journals/access.py decides, nothing else does).

The rule is the one a runtime token's ``run_prefix`` follows (journals.models.ApiToken.allows_run): an id
starts with the prefix, and the empty prefix covers every run. Teams sit below the journal store: they
name runs by their id, never by a foreign key, so that the store's selectors can use them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

# The same bound as journals.models.ID_MAX (a run id is never longer); spelled out so teams import nothing.
PREFIX_MAX = 200
ALL_RUNS_TEAM = "all-runs"


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    # The identity provider's group whose members are this team's members: set on each OpenID Connect
    # sign-in (loopx_site/oidc.py). Blank: members are managed here by hand.
    oidc_group = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="Members of this provider group join the team at each sign-in (and leave it when they leave "
        "the group). Blank: members are managed here.",
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="loopx_teams")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            # One team per provider group: a sign-in then knows exactly which teams a group means.
            models.UniqueConstraint(
                fields=["oidc_group"], condition=~models.Q(oidc_group=""), name="team_oidc_group_unique"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class TeamPrefix(models.Model):
    """One run-id prefix of a team. The empty prefix covers every run."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="prefixes")
    prefix = models.CharField(max_length=PREFIX_MAX, blank=True, help_text="Run ids starting with this. Blank: all.")

    class Meta:
        ordering = ["team", "prefix"]
        verbose_name_plural = "team prefixes"
        constraints = [models.UniqueConstraint(fields=["team", "prefix"], name="teamprefix_unique")]

    def __str__(self) -> str:
        return f"{self.team.name}: {self.prefix or '(all runs)'}"
