"""The admin's edits on the operator trail: a ModelAdmin mixin that writes one OperatorAction for each add,
change and delete, in the admin's own transaction (Django runs the add/change and delete views atomically;
bulk deletes are wrapped here), with the object's fields before and after. Secret fields (a password hash,
a webhook's signing secret) are never copied: only whether they changed.

Used for webhooks (notifications/admin.py), beat's schedules, users and groups (console/admin.py
re-registers django-celery-beat's and django.contrib.auth's admins with it).
"""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from trail.services import operator_action_record

# Fields whose value never reaches the trail; a change of one shows as "changed".
SECRET_FIELDS = frozenset({"password", "secret", "token_hash"})


def snapshot(obj: models.Model | None) -> dict[str, Any]:
    """The object's own fields and its many-to-many members (as names), secrets left out."""
    if obj is None or obj.pk is None:
        return {}
    out: dict[str, Any] = {}
    for f in obj._meta.concrete_fields:
        if f.name in SECRET_FIELDS:
            out[f.name] = "(secret)"
            continue
        value = f.value_from_object(obj)
        out[f.name] = value if isinstance(value, str | int | float | bool | type(None) | list | dict) else str(value)
    for m2m in obj._meta.many_to_many:
        out[m2m.name] = sorted(str(o) for o in getattr(obj, m2m.name).all())
    return out


def _secret_changed(before: dict[str, Any], obj: models.Model, old: models.Model | None) -> list[str]:
    if old is None:
        return []
    return [f.name for f in obj._meta.concrete_fields if f.name in SECRET_FIELDS
            and f.value_from_object(obj) != f.value_from_object(old)]


class AuditedAdminMixin:
    """``trail_kind`` names the family: ``<family>_create``, ``_change``, ``_delete`` must be trail kinds."""

    trail_kind: str = ""

    def _kind(self, op: str) -> str:
        family = self.trail_kind or type(self).__name__.lower()
        return f"{family}_{op}"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        old = type(obj)._default_manager.filter(pk=obj.pk).first() if change and obj.pk else None
        request._loopx_trail_before = (snapshot(old), old)  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        obj = form.instance
        before, old = getattr(request, "_loopx_trail_before", ({}, None))
        after = snapshot(obj)
        secrets = _secret_changed(before, obj, old)
        operator_action_record(
            actor=request.user,
            kind=self._kind("change" if change else "create"),
            reason=f"{obj._meta.verbose_name} {obj} {'changed' if change else 'created'} in the admin",
            before=before,
            after={**after, **({"secrets_changed": secrets} if secrets else {})},
        )

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        before = snapshot(obj)
        name = f"{obj._meta.verbose_name} {obj}"
        with transaction.atomic():
            super().delete_model(request, obj)  # type: ignore[misc]
            operator_action_record(
                actor=request.user, kind=self._kind("delete"), reason=f"{name} deleted in the admin", before=before
            )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic():
            for obj in list(queryset):
                self.delete_model(request, obj)
