"""Public safety (docs/contract.md, section 8): secret fields are redacted in every projection."""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"
_SECRET_NAMES = frozenset({"secret", "token", "password", "authorization", "api_key", "ticket", "credential"})
_SECRET_SUFFIXES = ("_secret", "_token", "_password", "_key")


def is_secret_field(name: str) -> bool:
    lowered = name.lower()
    if lowered == "idempotency_key":
        return False
    return lowered in _SECRET_NAMES or lowered.endswith(_SECRET_SUFFIXES)


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret field, at any depth, replaced by ``"[redacted]"``."""
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_field(k) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
