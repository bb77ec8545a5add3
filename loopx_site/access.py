"""Who may do what: the one place roles are decided, for the API now and the pages later.

Roles are the groups `viewer`, `operator` and `admin` (created by audits/migrations/0003_roles.py); a
superuser counts as admin. Each role includes the ones before it. A runtime's API token is not a user:
it may ingest, claim and report recovery actions, and read what its run prefix covers, but never approve
or block (that is a person's decision).
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from journals.models import ApiToken

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
_RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}


def role_of(user: Any) -> str | None:
    """The highest role of a user, or None (anonymous, inactive, or in no role group)."""
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return None
    if getattr(user, "is_runtime", False):
        return None  # a runtime token is not a person and holds no role
    if getattr(user, "is_superuser", False):
        return ADMIN
    cached = getattr(user, "_loopx_role", False)
    if cached is not False:
        return cached
    names = set(user.groups.values_list("name", flat=True))
    role = max((n for n in names if n in _RANK), key=_RANK.__getitem__, default=None)
    user._loopx_role = role  # one query per request, however many checks a view makes
    return role


def _at_least(user: Any, role: str) -> bool:
    have = role_of(user)
    return have is not None and _RANK[have] >= _RANK[role]


def can_view(user: Any) -> bool:
    return _at_least(user, VIEWER)


def can_operate(user: Any) -> bool:
    return _at_least(user, OPERATOR)


def can_administer(user: Any) -> bool:
    return _at_least(user, ADMIN)


def runtime_token(request: Request) -> ApiToken | None:
    """The API token the request authenticated with, if any (journals.authentication)."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiToken) else None


class CanView(BasePermission):
    """Reads: a viewer (or higher), or a runtime token."""

    message = "You need the viewer role (or a runtime API token) to read this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return runtime_token(request) is not None or can_view(request.user)


class CanRunRecovery(BasePermission):
    """The runtime's side: ingest and the recovery gate. A runtime token, or an operator; reads: viewers."""

    message = "You need a runtime API token or the operator role to do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        if runtime_token(request) is not None:
            return True
        if request.method in SAFE_METHODS:
            return can_view(request.user)
        return can_operate(request.user)


class CanOperate(BasePermission):
    """A person's decision (approve, block, evidence): the operator role; never a runtime token."""

    message = "You need the operator role to do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        if runtime_token(request) is not None:
            return False
        if request.method in SAFE_METHODS:
            return can_view(request.user)
        return can_operate(request.user)


class CanExportRaw(BasePermission):
    """The run export, which hands out raw journal bytes, secrets included (contract section 8): the operator
    role, for reads too; never a runtime token, never a viewer."""

    message = "You need the operator role to export a run's raw bytes."

    def has_permission(self, request: Request, view: Any) -> bool:
        return runtime_token(request) is None and can_operate(request.user)
