"""Keep the role groups' permissions complete as models are added.

audits/migrations/0003_roles.py creates the groups with the permissions that existed then; models added
by later migrations (findings, webhooks, console annotations, package uploads) would be missing from them.
This runs after every `migrate` (post_migrate) and is idempotent: viewers view everything but API tokens
and webhook secrets' models, operators add what the services write, admins get every permission of the
project's apps.
"""

from __future__ import annotations

from typing import Any

PROJECT_APPS = ("journals", "trail", "recovery", "audits", "console", "notifications", "teams")
# Models whose mere listing would expose credentials (hashed or not): admins only.
ADMIN_ONLY_MODELS = frozenset({"apitoken", "webhook"})
OPERATOR_ADDS = {"recovery": ("operatorevidence", "gatedecision"), "trail": ("operatoraction",)}


def sync_roles(**_: Any) -> None:
    from django.contrib.auth.models import Group, Permission

    ours = Permission.objects.filter(content_type__app_label__in=PROJECT_APPS).select_related("content_type")
    view = [p for p in ours if p.codename.startswith("view_") and p.content_type.model not in ADMIN_ONLY_MODELS]
    operator_adds = [
        p
        for p in ours
        if p.codename.startswith("add_") and p.content_type.model in OPERATOR_ADDS.get(p.content_type.app_label, ())
    ]
    admin = list(ours) + list(
        Permission.objects.filter(
            content_type__app_label="auth", codename__in=["view_user", "change_user", "view_group"]
        )
    )
    for name, perms in (("viewer", view), ("operator", view + operator_adds), ("admin", admin)):
        group, _created = Group.objects.get_or_create(name=name)
        group.permissions.set(perms)
