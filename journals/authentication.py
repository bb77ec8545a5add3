"""Runtime authentication: `Authorization: Bearer <token>` against ApiToken (only hashes are stored),
and the per-token throttle (scope `api_token`, rate in REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from journals.models import ApiToken
from journals.selectors import api_token_find
from journals.services import api_token_touch


class RuntimePrincipal:
    """`request.user` for a runtime token: authenticated, but no person and no role (journals.access)."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    is_runtime = True
    pk = None
    id = None

    def __init__(self, token: ApiToken) -> None:
        self.token = token
        self.username = f"token:{token.name}"

    def __str__(self) -> str:
        return self.username


class ApiTokenAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[RuntimePrincipal, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None  # not ours: session authentication may still apply
        # Messages never echo the header: it may be a real token sent to the wrong place.
        if len(parts) != 2:
            raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <token>'.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed("Invalid token.") from exc
        token = api_token_find(raw=raw)
        if token is None:
            raise AuthenticationFailed("Invalid or revoked token.")
        api_token_touch(token=token)
        return RuntimePrincipal(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="loopx"'


class ApiTokenRateThrottle(SimpleRateThrottle):
    """Per-token request rate; people using the API through their session are not throttled by it."""

    scope = "api_token"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(getattr(request, "auth", None), ApiToken):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
