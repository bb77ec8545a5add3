"""Reads of package uploads for people: which uploads a person may see (journals.access decides the runs)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from journals.access import run_scope
from recovery.packages.models import PackageUpload


def package_uploads_visible(*, user: Any) -> QuerySet[PackageUpload]:
    """The uploads ``user`` may see: every one when they see every run; otherwise their own, and those whose
    run (once read from the manifest) is one they see. Another team's upload answers as a missing one."""
    scope = run_scope(user=user)
    if scope.everything:
        return PackageUpload.objects.all()
    mine = Q(uploader_id=user.pk) if getattr(user, "pk", None) is not None else Q(pk__in=[])
    return PackageUpload.objects.filter(mine | (Q(run_ident__isnull=False) & scope.q("run_ident")))
