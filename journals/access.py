"""Who may do what, and on which runs: the one place roles and run visibility are decided, for pages and
API alike (docs/access.md).

Roles are the groups `viewer`, `operator` and `admin` (created by audits/migrations/0003_roles.py); a
superuser counts as admin. Each role includes the ones before it. A runtime's API token is not a user:
it may ingest, claim and report recovery actions, and read what its run prefix covers, but never approve
or block (that is a person's decision).

Which runs: a runtime token sees the runs its ``run_prefix`` covers; a person with the admin role sees every
run; any other person sees the runs whose id starts with a prefix of one of their teams (teams.models), and
a person in no team sees none (fail closed). ``run_scope`` says it, ``runs_visible`` is its queryset filter.
A run outside a person's scope answers exactly as a run that does not exist (404), never 403.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from journals.models import ApiToken

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
_RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}


def role_from_groups(groups: Any) -> str | None:
    """The role an identity provider's groups give (settings LOOPX_OIDC_GROUPS_VIEWER, _OPERATOR, _ADMIN:
    provider group names), the highest when several match; None when none does (fail closed)."""
    from django.conf import settings

    names = set(groups)
    mapped = {
        VIEWER: settings.LOOPX_OIDC_GROUPS_VIEWER,
        OPERATOR: settings.LOOPX_OIDC_GROUPS_OPERATOR,
        ADMIN: settings.LOOPX_OIDC_GROUPS_ADMIN,
    }
    held = [role for role, provider_groups in mapped.items() if names & set(provider_groups)]
    return max(held, key=_RANK.__getitem__, default=None)


def role_of(user: Any) -> str | None:
    """The highest role of a user, or None (anonymous, inactive, or in no role group)."""
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return None
    if getattr(user, "is_runtime", False):
        return None  # a runtime token is not a person and holds no role
    if getattr(user, "is_superuser", False):
        return ADMIN
    cached = getattr(user, "_loopx_role", False)
    if cached is False:
        _load_person(user)
    role: str | None = user._loopx_role
    return role


def _load_person(user: Any) -> None:
    """The user's role and team prefixes in one query (their groups joined beside their teams' prefixes: a
    person has a few of each), kept on the user object: one query per request, however many checks a
    view makes, as when only the role was read."""
    from django.contrib.auth import get_user_model

    pairs = get_user_model().objects.filter(pk=user.pk).values_list("groups__name", "loopx_teams__prefixes__prefix")
    names = {name for name, _ in pairs if name is not None}
    user._loopx_role = max((n for n in names if n in _RANK), key=_RANK.__getitem__, default=None)
    user._loopx_prefixes = tuple(sorted({prefix for _, prefix in pairs if prefix is not None}))


def operators_of_run(*, run_id: str, limit: int = 200) -> list[str]:
    """The usernames of active people who may act on ``run_id``'s turns (operator or admin, and a team that
    sees the run; admins see every run), read in one query: whom a turn can be handed to."""
    from django.contrib.auth import get_user_model

    rows = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name__in=[OPERATOR, ADMIN]))
        .values_list("username", "is_superuser", "groups__name", "loopx_teams__prefixes__prefix")
        .order_by("username")
    )
    roles: dict[str, set[str]] = {}
    prefixes: dict[str, set[str]] = {}
    for username, superuser, group, prefix in rows:
        roles.setdefault(username, set()).add(ADMIN if superuser else str(group))
        if prefix is not None:
            prefixes.setdefault(username, set()).add(prefix)
    allowed = [
        name
        for name, have in roles.items()
        if ADMIN in have or (OPERATOR in have and RunScope.of(sorted(prefixes.get(name, ()))).allows(run_id))
    ]
    return allowed[:limit]


def _at_least(user: Any, role: str) -> bool:
    have = role_of(user)
    return have is not None and _RANK[have] >= _RANK[role]


def can_view(user: Any) -> bool:
    return _at_least(user, VIEWER)


def can_operate(user: Any) -> bool:
    return _at_least(user, OPERATOR)


def can_administer(user: Any) -> bool:
    return _at_least(user, ADMIN)


@dataclass(frozen=True)
class RunScope:
    """The runs someone may see and act on: those whose id starts with one of ``prefixes`` (the runtime
    token's rule, ApiToken.allows_run), every run when ``prefixes`` is None, none when it is empty."""

    prefixes: tuple[str, ...] | None

    @classmethod
    def of(cls, prefixes: Any) -> RunScope:
        found = tuple(sorted(set(prefixes)))
        return cls(None) if "" in found else cls(found)

    @property
    def everything(self) -> bool:
        return self.prefixes is None

    def allows(self, run_id: str) -> bool:
        return self.prefixes is None or any(run_id.startswith(p) for p in self.prefixes)

    def q(self, field: str = "run_id") -> Q:
        """The filter of a queryset to the runs in scope, ``field`` naming the run's id (``run__run_id``
        from a turn). Nothing in scope: a filter that matches no row (the ORM then sends no query)."""
        if self.prefixes is None:
            return Q()
        if not self.prefixes:
            return Q(pk__in=[])
        found = Q()
        for prefix in self.prefixes:
            found |= Q(**{f"{field}__startswith": prefix})
        return found

    @property
    def cache_key(self) -> str:
        """A short name of the scope, for caches of counts over it."""
        if self.prefixes is None:
            return "all"
        return hashlib.sha256("\0".join(self.prefixes).encode()).hexdigest()[:16]


EVERY_RUN = RunScope(None)
NO_RUN = RunScope(())


def run_scope(*, user: Any, token: ApiToken | None = None) -> RunScope:
    """The runs ``user`` (or the runtime ``token`` they authenticated with) may see and act on."""
    if token is None:
        token = getattr(user, "token", None) if getattr(user, "is_runtime", False) else None
    if isinstance(token, ApiToken):
        return RunScope.of([token.run_prefix])
    role = role_of(user)
    if role is None:
        return NO_RUN
    if role == ADMIN:
        return EVERY_RUN
    return RunScope.of(user._loopx_prefixes) if hasattr(user, "_loopx_prefixes") else _scope_read(user)


def _scope_read(user: Any) -> RunScope:
    _load_person(user)
    return RunScope.of(user._loopx_prefixes)


def runs_visible(*, user: Any, field: str = "run_id", token: ApiToken | None = None) -> Q:
    """The queryset filter to the runs ``user`` may see (``field`` names the run's id from the model)."""
    return run_scope(user=user, token=token).q(field)


def request_scope(request: Request) -> RunScope:
    """The scope of an API request: its runtime token's, or its person's."""
    return run_scope(user=request.user, token=runtime_token(request))


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


class OperatorRole(BasePermission):
    """The operator role for every method, reads included (beat's schedules, exports); never a runtime
    token, never a viewer."""

    message = "You need the operator role to do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return runtime_token(request) is None and can_operate(request.user)


class CanExport(OperatorRole):
    """An export (the operator trail, a run's bytes): the operator role, for its GET too, as in the console."""

    message = "You need the operator role to export this."


class CanExportRaw(CanExport):
    """The run export, which hands out raw journal bytes, secrets included (contract section 8)."""

    message = "You need the operator role to export a run's raw bytes."
