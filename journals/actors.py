"""Who acts: the one type every service's ``actor`` takes.

A person (a signed-in user), a runtime token (the API's ``RuntimePrincipal``, or the ``ApiToken`` itself when a
command acts for it), an anonymous visitor (refused by the services that need a person), or None for the
system (the recovery gate, a scheduled audit).
"""

from __future__ import annotations

from typing import TypeAlias

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User

from journals.authentication import RuntimePrincipal
from journals.models import ApiToken

Actor: TypeAlias = AbstractBaseUser | AnonymousUser | RuntimePrincipal | ApiToken | None


def person_of(actor: Actor) -> User | None:
    """The person behind ``actor``, as a row's ``..._by`` column keeps it: a signed-in user, or None for a token,
    an anonymous visitor or the system (their name is kept beside it)."""
    return actor if isinstance(actor, User) and actor.pk is not None else None
