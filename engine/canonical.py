"""Strict line parsing, canonical bytes and digests (docs/contract.md, section 1.3).

Bytes in, never guessed. A line is classified as one of:
- a complete JSON object (a *record*), possibly ``record_invalid`` (float, duplicate key, lone surrogate);
- ``storage_corruption``: anything that is not one complete JSON object (torn write, bad UTF-8, NaN,
  an empty line, a bare array or number).

Speed: the common case is a writer that already emits canonical bytes. orjson parses that line and its
canonical re-serialisation is compared with the raw bytes; equality proves there was no duplicate key and
no out-of-range integer (orjson would have changed either). Everything else takes the strict stdlib path,
which is slower but classifies precisely. Both paths give identical results (tests/engine/test_receipt.py
checks the equivalence with Hypothesis).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, TypeGuard

try:  # orjson is a dependency of the project; the engine still works (slower) without it.
    import orjson

    HAVE_ORJSON = True
except ImportError:  # pragma: no cover - exercised only on installs without orjson
    HAVE_ORJSON = False

STORAGE_CORRUPTION = "storage_corruption"
RECORD_INVALID = "record_invalid"


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer as parsed: an int, never a bool (which Python counts as one)."""
    return type(value) is int


def canonical_bytes(obj: Any) -> bytes:
    """The contract's canonical form: sorted keys, no spaces, UTF-8 (not ASCII-escaped)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(obj: Any) -> str:
    """sha256 hex of the canonical bytes; the chain's ``prev`` and checkpoints' ``state_digest``."""
    return hashlib.sha256(canonical_bytes(obj)).hexdigest()


def canonical_bytes_no_float(obj: Any) -> bytes:
    """The canonical bytes of a value that holds no float (a fold, a checkpoint's state), fast.

    orjson with sorted keys writes exactly the contract's bytes for strings, integers, booleans, null,
    lists and objects with string keys (tests/engine/test_receipt.py checks it with Hypothesis); floats it
    spells differently ("0.00001" for 1e-05), which is why a value with floats must not come here. What
    orjson refuses (an integer beyond 64 bits, nesting beyond its limit, a non-string key) takes the
    formula itself."""
    if HAVE_ORJSON:
        try:
            return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass
    return canonical_bytes(obj)


def digest_no_float(obj: Any) -> str:
    return hashlib.sha256(canonical_bytes_no_float(obj)).hexdigest()


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """One line of a journal. ``obj`` is set for every complete JSON object, valid or not."""

    obj: dict[str, Any] | None
    canonical: bytes | None
    error: str | None = None  # STORAGE_CORRUPTION or RECORD_INVALID
    detail: str = ""

    @property
    def digest(self) -> str | None:
        return hashlib.sha256(self.canonical).hexdigest() if self.canonical is not None else None


class _Invalid(Exception):
    """Raised inside the strict parser for a complete object that breaks the value rules of docs/contract.md,
    section 1.3."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _reject_float(text: str) -> Any:
    raise _Invalid("a number that is not an integer")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Invalid("a duplicate key in an object")
        out[key] = value
    return out


def _has_float_or_surrogate(value: Any) -> str | None:
    if isinstance(value, float):
        return "a number that is not an integer"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate in a string"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _has_float_or_surrogate(key) or _has_float_or_surrogate(item)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for item in value:
            problem = _has_float_or_surrogate(item)
            if problem:
                return problem
    return None


def parse_strict(line: bytes) -> ParsedLine:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return ParsedLine(None, None, STORAGE_CORRUPTION, "not valid UTF-8")
    if not text.strip():
        return ParsedLine(None, None, STORAGE_CORRUPTION, "an empty line")
    invalid: str | None = None
    try:
        obj = json.loads(text, object_pairs_hook=_pairs, parse_float=_reject_float, parse_constant=_reject_constant)
    except _Invalid as exc:
        invalid = str(exc)
        # Re-read leniently so that the envelope (branch, lsn) of an invalid record is still known.
        try:
            obj = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return ParsedLine(None, None, STORAGE_CORRUPTION, "not a complete JSON object")
    except RecursionError:
        return ParsedLine(None, None, RECORD_INVALID, "nested too deeply")
    except ValueError:
        return ParsedLine(None, None, STORAGE_CORRUPTION, "not a complete JSON object (torn or malformed)")
    if not isinstance(obj, dict):
        return ParsedLine(None, None, STORAGE_CORRUPTION, "a JSON value that is not an object")
    if invalid is None:
        invalid = _has_float_or_surrogate(obj)
    if invalid is not None:
        try:
            canonical = canonical_bytes(obj) if "surrogate" not in invalid else None
        except (ValueError, UnicodeEncodeError):  # pragma: no cover - defensive
            canonical = None
        return ParsedLine(obj, canonical, RECORD_INVALID, invalid)
    return ParsedLine(obj, canonical_bytes(obj))


def parse_line(line: bytes) -> ParsedLine:
    """Classify one journal line (without its trailing newline)."""
    if HAVE_ORJSON and line[:1] == b"{":
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return parse_strict(line)
        # Equal bytes prove: no duplicate key, no big integer turned float, nothing re-escaped; orjson
        # refuses lone surrogates itself. orjson spells a float with "." or a signed exponent, so only a
        # line with one of those can hold one. The line itself is kept as the canonical bytes (orjson's
        # result would hold on to its whole 4 KiB write buffer).
        try:
            written = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # orjson reads 1,024 levels of nesting but writes 254: the strict reader decides
            return parse_strict(line)
        if (
            isinstance(obj, dict)
            and written == line
            and not ((b"." in line or b"+" in line or b"e-" in line) and _has_float_or_surrogate(obj) is not None)
        ):
            return ParsedLine(obj, bytes(line))
    return parse_strict(line)
