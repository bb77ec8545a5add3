"""Admin: teams, their run-id prefixes and members (the admin role manages them)."""

from __future__ import annotations

from django.contrib import admin

from .models import Team, TeamPrefix


class TeamPrefixInline(admin.TabularInline[TeamPrefix, Team]):
    model = TeamPrefix
    extra = 1


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin[Team]):
    list_display = ["name", "oidc_group", "created_at"]
    search_fields = ["name", "oidc_group"]
    filter_horizontal = ["members"]
    inlines = [TeamPrefixInline]
