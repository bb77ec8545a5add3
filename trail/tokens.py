"""Runtime API tokens created and revoked: acts of an operator, so each is a trail row written with it.

Only the token's sha256 is stored; the raw token is returned once. Journals' authentication reads tokens
and stamps their last use (journals/services.py ``api_token_touch``); it never creates or revokes one.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from journals.actors import Actor
from journals.models import ApiToken
from journals.services import TOKEN_PREFIX
from trail.services import operator_action_record


def _token_state(token: ApiToken) -> dict[str, Any]:
    # What the audit trail keeps of a token: never the token, nor its hash.
    return {
        "name": token.name,
        "run_prefix": token.run_prefix,
        "revoked_at": token.revoked_at.isoformat() if token.revoked_at else None,
    }


def api_token_create(
    *, name: str, run_prefix: str = "", actor: Actor = None, actor_name: str | None = None
) -> tuple[ApiToken, str]:
    """Create a token; the raw token is returned once and only its sha256 is stored. Audited
    (``actor``: the user in the admin; ``actor_name`` for a command line, e.g. ``manage.py``)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(name=name, run_prefix=run_prefix, token_hash=ApiToken.hash(raw))
        operator_action_record(
            actor=actor,
            actor_name=actor_name if actor is None else None,
            kind="api_token_create",
            reason=f"runtime token {name!r} created",
            after=_token_state(token),
        )
    return token, raw


def api_token_revoke(*, token: ApiToken, actor: Actor = None, actor_name: str | None = None) -> ApiToken:
    if token.revoked_at is None:
        with transaction.atomic():
            before = _token_state(token)
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            operator_action_record(
                actor=actor,
                actor_name=actor_name if actor is None else None,
                kind="api_token_revoke",
                reason=f"runtime token {token.name!r} revoked",
                before=before,
                after=_token_state(token),
            )
    return token
