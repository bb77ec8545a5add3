"""``manifest.json``: strict parsing into the shape of docs/packages.md ("The format").

Problems are described by entry index and field, never by quoting the manifest's text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from engine import is_int as _is_int

from .paths import check_path, collision_key

FORMAT = "loopx-recovery-package"
VERSION = 1
JOURNAL = "journal.jsonl"
MANIFEST = "manifest.json"
_TOP_KEYS = {"format", "version", "run", "members"}
_ENTRY_KEYS = {"path", "size", "sha256"}
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass(slots=True)
class ManifestEntry:
    path: str  # normalised
    size: int
    sha256: str  # lower-case hex


@dataclass(slots=True)
class Manifest:
    run: str
    entries: dict[str, ManifestEntry] = field(default_factory=dict)  # by normalised path, in manifest order


class _Bad(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Bad("a duplicate key in an object")
        out[key] = value
    return out


def _no_float(text: str) -> Any:
    raise _Bad("a number that is not an integer")


def _no_constant(text: str) -> Any:
    raise _Bad("a non-finite number")


def parse_manifest(data: bytes, max_entries: int) -> tuple[Manifest | None, list[str]]:
    """The manifest, or None and every problem found (each one line, in words)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, ["the manifest is not valid UTF-8"]
    try:
        obj = json.loads(text, object_pairs_hook=_pairs, parse_float=_no_float, parse_constant=_no_constant)
    except _Bad as exc:
        return None, [f"the manifest holds {exc}"]
    except (ValueError, RecursionError):
        return None, ["the manifest is not one well-formed JSON value"]
    if not isinstance(obj, dict):
        return None, ["the manifest is not a JSON object"]
    problems: list[str] = []
    missing = sorted(_TOP_KEYS - obj.keys())
    extra = len(obj.keys() - _TOP_KEYS)
    if missing:
        problems.append(f"the manifest lacks {', '.join(missing)}")
    if extra:
        problems.append(f"the manifest has {extra} unexpected top-level key(s)")
    if "format" in obj and obj["format"] != FORMAT:
        problems.append(f"format is not {FORMAT}")
    if "version" in obj and not (_is_int(obj["version"]) and obj["version"] == VERSION):
        problems.append(f"version is not {VERSION}")
    run = obj.get("run")
    if "run" in obj and not (isinstance(run, str) and run):
        problems.append("run is not a non-empty string")
    members = obj.get("members")
    entries: dict[str, ManifestEntry] = {}
    if "members" in obj:
        if not isinstance(members, list):
            problems.append("members is not a list")
        elif len(members) > max_entries:
            problems.append(f"members lists {len(members)} entries, over {max_entries}")
        else:
            problems.extend(_entries(members, entries))
    if isinstance(members, list) and not problems and JOURNAL not in entries:
        problems.append(f"members does not list {JOURNAL}")
    if problems or not isinstance(run, str):
        return None, problems
    return Manifest(run, entries), []


def _entries(members: list[Any], entries: dict[str, ManifestEntry]) -> list[str]:
    problems: list[str] = []
    keys: dict[str, int] = {}
    for index, item in enumerate(members):
        where = f"entry {index}"
        if not isinstance(item, dict) or item.keys() != _ENTRY_KEYS:
            problems.append(f"{where} is not an object with exactly path, size and sha256")
            continue
        path, size, digest = item["path"], item["size"], item["sha256"]
        ok = True
        if not _is_int(size) or size < 0:
            problems.append(f"{where}: size is not a non-negative integer")
            ok = False
        if not isinstance(digest, str) or not _HEX64.match(digest):
            problems.append(f"{where}: sha256 is not 64 hex digits")
            ok = False
        if not isinstance(path, str):
            problems.append(f"{where}: path is not a string")
            continue
        checked = check_path(path)
        if not checked.ok or checked.normalised is None:
            problems.append(f"{where}: path breaks the path rules ({', '.join(c for c, _ in checked.problems)})")
            continue
        if checked.is_dir:
            problems.append(f"{where}: path names a directory")
            continue
        norm = checked.normalised
        if norm != JOURNAL and not norm.startswith("state/"):
            problems.append(f"{where}: path is neither {JOURNAL} nor under state/")
            continue
        key = collision_key(norm)
        if key in keys:
            problems.append(f"{where}: the same path as entry {keys[key]}")
            continue
        keys[key] = index
        if ok:
            entries[norm] = ManifestEntry(norm, size, digest.lower())
    return problems
