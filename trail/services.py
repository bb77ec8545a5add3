"""Writes of the operator trail: one chained row per act of a person, a token or the system.

Every service that changes state records its act here, in its own transaction, after its other writes.
"""

from __future__ import annotations

from typing import Any

from journals.actors import Actor
from journals.models import Run, Turn
from journals.storable import storable, storable_redacted
from kernel.errors import ServiceError
from trail import chain
from trail.models import OperatorAction

REASON_MAX = 4000


def reason_clean(*, reason: Any) -> str:
    """The "why" of an operator's act, as the trail keeps it: required, at most REASON_MAX characters,
    trimmed. Every service that asks a person for a reason checks it here (400 ``reason_required`` or
    ``reason_too_long``)."""
    if not isinstance(reason, str) or not reason.strip():
        raise ServiceError(400, "reason_required", "a reason is required")
    if len(reason) > REASON_MAX:
        raise ServiceError(400, "reason_too_long", f"the reason is longer than {REASON_MAX} characters")
    return storable(reason.strip())


def actor_display(actor: Actor) -> str:
    """The name a trail row, a gate decision or a finding keeps for ``actor`` (at most 150 characters): a
    person's username, ``token:<name>`` for a runtime token, ``recovery-gate`` for the system."""
    if actor is None:
        return "recovery-gate"
    if hasattr(actor, "get_username"):
        return str(actor.get_username())[:150]
    token = getattr(actor, "token", None)
    name = getattr(actor, "username", None) or (f"token:{token.name}" if token is not None else None)
    return str(name or getattr(actor, "name", None) or "unknown")[:150]


def operator_action_record(
    *,
    actor: Actor,
    kind: str,
    reason: str,
    run: Run | None = None,
    turn: Turn | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    actor_name: str | None = None,
    via: str | None = None,
) -> OperatorAction:
    """Append one audit row, chained to the one before it (trail/chain.py: under the trail head's lock,
    in the caller's transaction; call it after the change's other writes). ``actor`` None is the system:
    the gate itself unless ``actor_name`` says who (e.g. ``manage.py``); a runtime token (or the API's
    principal for one) is recorded as ``token:<name>``; before/after are redacted. ``via`` overrides where
    the act came from (otherwise the request's path, or ``system``)."""
    name = actor_name or actor_display(actor)
    return chain.trail_append(
        actor=actor if getattr(actor, "pk", None) and hasattr(actor, "get_username") else None,
        actor_name=str(name)[:150],
        kind=kind,
        run=run,
        turn=turn,
        reason=storable(reason),
        before=storable_redacted(before or {}),
        after=storable_redacted(after or {}),
        via_name=via,
    )
