"""OpenID Connect sign-in (mozilla-django-oidc), configured by environment (docs/access.md).

Off unless ``OIDC_RP_CLIENT_ID`` and the provider (``OIDC_OP_DISCOVERY_URL``, or its four endpoints) are set:
then the login page offers "Sign in with <provider>" beside the local accounts. The authorization code flow
with PKCE; the id_token's signature (RS256 against the provider's JWKS, or HS256 with the client secret),
nonce, expiry, audience and issuer are checked. At each sign-in the person's account is made or brought up
to date from the provider's claims: their role from the groups claim (``LOOPX_OIDC_GROUPS_VIEWER`` /
``_OPERATOR`` / ``_ADMIN``, decided by journals.access.role_from_groups), and their membership of every
team that names a provider group (teams.models.Team.oidc_group).

A local account (one with a password) is never taken over by a provider's user of the same name.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from journals import access
from teams.services import team_memberships_sync

logger = logging.getLogger("loopx.oidc")

# Our setting -> the discovery document's key, for endpoints left unset.
_DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_documents: dict[str, dict[str, Any]] = {}
_documents_lock = threading.Lock()


class OIDCConfigurationError(SuspiciousOperation):
    """The provider's discovery document cannot be read or lacks an endpoint: sign-in fails, closed."""


def enabled() -> bool:
    return bool(getattr(settings, "LOOPX_OIDC_ENABLED", False))


def discovery() -> dict[str, Any]:
    """The provider's discovery document, read once per process (and per URL) on first use: never at start-up,
    so that a provider down while the site starts does not stop it."""
    url = getattr(settings, "OIDC_OP_DISCOVERY_URL", "")
    if not url:
        return {}
    with _documents_lock:
        if url not in _documents:
            try:
                response = requests.get(url, timeout=getattr(settings, "OIDC_TIMEOUT", 10))
                response.raise_for_status()
                document = response.json()
            except (requests.RequestException, ValueError) as exc:
                raise OIDCConfigurationError("the provider's discovery document cannot be read") from exc
            if not isinstance(document, dict):
                raise OIDCConfigurationError("the provider's discovery document is not an object")
            _documents[url] = document
        return _documents[url]


def oidc_setting(attr: str, *args: Any) -> Any:
    """A mozilla-django-oidc setting; an endpoint left empty comes from the discovery document."""
    if attr in _DISCOVERED and not getattr(settings, attr, ""):
        found = discovery().get(_DISCOVERED[attr])
        if not isinstance(found, str) or not found:
            raise OIDCConfigurationError(f"the provider names no {_DISCOVERED[attr]}")
        return found
    return import_from_settings(attr, *args)


def _groups(claims: dict[str, Any]) -> set[str]:
    value = claims.get(settings.LOOPX_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {g for g in value if isinstance(g, str)}
    return set()


def _username(claims: dict[str, Any]) -> str:
    for claim in (settings.LOOPX_OIDC_USERNAME_CLAIM, "email", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def oidc_person_sync(*, user: Any, claims: dict[str, Any]) -> Any:
    """Bring a provider's person up to date from their claims: e-mail and names, the one role their groups
    give (none: they can sign in but see nothing), and their provider-mapped teams."""
    groups = _groups(claims)
    role = access.role_from_groups(groups)
    with transaction.atomic():
        for field, claim in (("email", "email"), ("first_name", "given_name"), ("last_name", "family_name")):
            value = claims.get(claim)
            if isinstance(value, str):
                setattr(user, field, value[: user._meta.get_field(field).max_length])
        user.save(update_fields=["email", "first_name", "last_name"])
        user.groups.remove(*Group.objects.filter(name__in=access.ROLES).exclude(name=role or ""))
        if role is not None:
            user.groups.add(Group.objects.get_or_create(name=role)[0])
        team_memberships_sync(user=user, groups=groups)
    for cached in ("_loopx_role", "_loopx_prefixes"):
        user.__dict__.pop(cached, None)
    return user


class LoopxOIDCBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # mozilla-django-oidc ships no types
    """Users by the username claim; roles and teams from the groups claim at every sign-in."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc_setting(attr, *args)

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        # A token that fails a check, or a provider that answers badly, signs nobody in: the person is sent
        # back to the login page (``LOGIN_REDIRECT_URL_FAILURE``), never shown a 400 or a 500. The reason is
        # logged, never the token.
        try:
            return super().authenticate(request, **kwargs)
        except (SuspiciousOperation, requests.RequestException) as exc:
            logger.warning("single sign-on refused", extra={"event": "oidc.refused", "reason": str(exc)[:200]})
            return None

    def verify_token(self, token: str, **kwargs: Any) -> Any:
        payload = super().verify_token(token, **kwargs)
        # mozilla-django-oidc checks the signature, the expiry and the nonce; the audience and the issuer
        # are checked here: a token the provider made for another client, or another provider's, is refused.
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the id_token is not for this client")
        issuer = discovery().get("issuer") or getattr(settings, "OIDC_OP_ISSUER", "")
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation("the id_token is from another issuer")
        return payload

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        name = _username(claims)
        return bool(claims.get("sub")) and 0 < len(name) <= 150

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        users = self.UserModel.objects.filter(username=_username(claims))
        found = users.first()
        if found is not None and found.has_usable_password():
            raise SuspiciousOperation("a local account has this user name; it signs in with its password")
        return users

    def create_user(self, claims: dict[str, Any]) -> Any:
        user = self.UserModel.objects.create_user(_username(claims))  # no password: the provider's alone
        return oidc_person_sync(user=user, claims=claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        return oidc_person_sync(user=user, claims=claims)


class _Enabled:
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        response: HttpResponse = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        return response


class SignInView(_Enabled, OIDCAuthenticationRequestView):  # type: ignore[misc]  # untyped, as above
    """Sends the browser to the provider (state, nonce and PKCE kept in the session)."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc_setting(attr, *args)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not enabled():  # the parent reads the endpoints at once; a 404 follows in dispatch
            return
        super().__init__(*args, **kwargs)


class CallbackView(_Enabled, OIDCAuthenticationCallbackView):  # type: ignore[misc]  # untyped, as above
    """The provider's answer: the code exchanged, the id_token checked, the person signed in."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc_setting(attr, *args)


def login_context(request: HttpRequest) -> dict[str, Any]:
    """Template context: the provider's name for the login page's button, when sign-in is configured."""
    if not enabled():
        return {}
    return {"oidc_provider": settings.LOOPX_OIDC_PROVIDER_NAME}
