"""The contract's canonical bytes and digests (the project's docs/contract.md, section 1.3).

The digest of a record is sha256 of ``json.dumps(record, sort_keys=True, separators=(",", ":"),
ensure_ascii=False).encode()``. Numbers in records are integers: a float, a non-finite number or a lone
surrogate anywhere makes a record ``record_invalid``, so the client refuses to write one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class RecordValueError(ValueError):
    """A value the contract does not allow in a record (a float, a lone surrogate, a non-string key, ...)."""


def canonical_bytes(obj: Any) -> bytes:
    """The canonical form: sorted keys, no spaces, UTF-8 (not ASCII-escaped). Byte-identical to the
    server's (the project's suite holds the two to it with Hypothesis)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(obj: Any) -> str:
    """sha256 hex of the canonical bytes: a record's identity and the next record's ``prev``."""
    return hashlib.sha256(canonical_bytes(obj)).hexdigest()


def check_value(value: Any, where: str = "record") -> None:
    """Raise RecordValueError for anything a record may not hold: only dicts with string keys, lists,
    strings (valid UTF-8), integers, booleans and null."""
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise RecordValueError(f"{where}: a string with a lone surrogate") from None
        return
    if isinstance(value, float):
        raise RecordValueError(f"{where}: a number that is not an integer (records hold integers only)")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise RecordValueError(f"{where}: an object key that is not a string")
            check_value(key, where)
            check_value(item, f"{where}.{key}")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_value(item, f"{where}[{index}]")
        return
    raise RecordValueError(f"{where}: a {type(value).__name__} is not a JSON value")


class _Duplicate(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def parse_record(line: bytes) -> dict[str, Any] | None:
    """The record of one journal line when it is one complete JSON object with values the contract
    allows (no float, no duplicate key, valid UTF-8), else None."""
    try:
        obj = json.loads(line.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=_no_constant)
    except (ValueError, _Duplicate, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    try:
        check_value(obj)
    except RecordValueError:
        return None
    return obj
