"""Values copied out of records into columns must be storable everywhere: PostgreSQL text and jsonb
refuse NUL characters, and no UTF-8 column takes a lone surrogate (both are legal inside a JSON string
and may sit in a record; the record's own bytes keep them, untouched, in a binary column). Neither jsonb
nor strict JSON has NaN or an infinity (a record that breaks the contract may spell ``1e999``, kept as
evidence): those become the strings "NaN", "Infinity", "-Infinity", never a silent null (the API's orjson
renderer would write null; DRF's encoder would refuse the answer).
"""

from __future__ import annotations

import math
import re
from typing import Any, overload

from engine.secrets import REDACTED, is_secret_field

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def is_storable(text: str) -> bool:
    # ASCII without NUL is the common case, and a cheaper test than the pattern.
    if text.isascii():
        return "\x00" not in text
    return _UNSTORABLE.search(text) is None


@overload
def storable(value: str) -> str: ...
@overload
def storable(value: Any) -> Any: ...
def storable(value: Any) -> Any:
    """A copy of ``value`` with NUL and lone surrogates replaced by U+FFFD in every string and key, and
    non-finite numbers spelled as strings."""
    if isinstance(value, str):
        # Most text is storable as it is: the test is cheaper than the substitution.
        return value if is_storable(value) else _UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def storable_redacted(value: Any) -> Any:
    """``storable(redact(value))`` in one walk: secret fields redacted at any depth (engine/secrets.py), then
    every string and key made storable. What every stored copy of a record's values or an output goes
    through; walking the tree once halves the cost of an assessment's output entries."""
    if isinstance(value, dict):
        return {
            storable(k): (REDACTED if isinstance(k, str) and is_secret_field(k) else storable_redacted(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [storable_redacted(v) for v in value]
    return storable(value)  # redaction walks lists and dicts only: a tuple is made storable as it is


def usable_key(value: str) -> bool:
    """Whether an id from a URL can name a row: what no column can hold (a NUL on PostgreSQL) names nothing."""
    return 0 < len(value) <= 200 and is_storable(value)
