"""Public safety (docs/contract.md, section 8): secret fields are redacted in every projection."""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"
_SECRET_NAMES = frozenset({"secret", "token", "password", "authorization", "api_key", "ticket", "credential"})
_SECRET_SUFFIXES = ("_secret", "_token", "_password", "_key")


def is_secret_field(name: str) -> bool:
    # A journal's field names are few and repeat on every record: each short one is decided once.
    known = _DECIDED.get(name)
    if known is None:
        lowered = name.lower()
        known = lowered != "idempotency_key" and (lowered in _SECRET_NAMES or lowered.endswith(_SECRET_SUFFIXES))
        if len(name) <= 64 and len(_DECIDED) < 4096:
            _DECIDED[name] = known
    return known


_DECIDED: dict[str, bool] = {}


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret field, at any depth, replaced by ``"[redacted]"``."""
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_field(k) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
