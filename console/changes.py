"""An operator action's before and after, shown as the fields that changed rather than two JSON documents.

The trail keeps both documents as they were written (redacted JSON, trail.models.OperatorAction); a person
reads what moved: each field whose value differs, with its value before and after. Secret fields are
redacted here too, whatever the document holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine import redact

ABSENT = "—"  # a field the document did not have (created, or removed)


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: str
    after: str


def _shown(value: Any) -> str:
    if value is _MISSING:
        return ABSENT
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


_MISSING = object()


def _fields(document: Any) -> dict[str, Any]:
    if isinstance(document, dict):
        return {str(k): v for k, v in redact(document).items()}
    return {} if document in (None, "") else {"value": redact(document)}


def field_changes(before: Any, after: Any) -> list[FieldChange]:
    """The fields whose value differs between ``before`` and ``after``, in the order the documents name
    them; a field only one of them has is shown as absent on the other side."""
    old, new = _fields(before), _fields(after)
    out: list[FieldChange] = []
    for name in dict.fromkeys([*old, *new]):
        was, now = old.get(name, _MISSING), new.get(name, _MISSING)
        if was != now:
            out.append(FieldChange(name, _shown(was), _shown(now)))
    return out
