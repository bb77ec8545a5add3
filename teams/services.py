"""The one writer of the team tables: teams made, members added, and memberships kept in step with an
identity provider's groups at sign-in."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from .models import Team, TeamPrefix


def team_ensure(*, name: str, prefixes: Iterable[str], oidc_group: str = "") -> Team:
    """The team of this name with at least these prefixes (made when missing; existing prefixes are kept)."""
    with transaction.atomic():
        team, _ = Team.objects.get_or_create(name=name, defaults={"oidc_group": oidc_group})
        for prefix in prefixes:
            TeamPrefix.objects.get_or_create(team=team, prefix=prefix)
    return team


def team_members_add(*, team: Team, users: Iterable[Any]) -> None:
    team.members.add(*users)


def team_memberships_sync(*, user: Any, groups: Iterable[str]) -> None:
    """Make the user a member of exactly the provider-mapped teams whose group is among ``groups``; teams
    without a provider group (managed by hand) are left as they are."""
    wanted = set(groups)
    mapped = Team.objects.exclude(oidc_group="")
    with transaction.atomic():
        joins = [team for team in mapped if team.oidc_group in wanted]
        user.loopx_teams.remove(*[team for team in mapped if team.oidc_group not in wanted])
        user.loopx_teams.add(*joins)
