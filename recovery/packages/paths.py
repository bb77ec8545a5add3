"""Member path rules (docs/packages.md): normalisation and the path_* findings.

Paths are compared after normalisation: ``./`` components and repeated ``/`` are folded, a trailing ``/``
marks a directory. Collisions are decided on a key that also folds Unicode (NFC) and case, because a package
restored on a case-insensitive or normalising filesystem would otherwise overwrite one member with another.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from . import report as codes

MAX_PATH_BYTES = 1024
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True, slots=True)
class CheckedPath:
    """A member name after the path rules: ``normalised`` is None when it names nothing, and "" for the
    archive's root itself (``./`` or ``.``, the first entry of ``tar -C dir .``): a directory, folded away."""

    raw: str
    normalised: str | None
    is_dir: bool
    problems: tuple[tuple[str, str], ...]  # (code, detail), every rule the name breaks

    @property
    def ok(self) -> bool:
        return not self.problems and self.normalised is not None

    @property
    def is_root(self) -> bool:
        return self.ok and self.normalised == ""


def _has_control(raw: str) -> bool:
    if raw.isascii():
        return not raw.isprintable()  # printable ASCII has no control characters
    return any(unicodedata.category(ch) == "Cc" for ch in raw)


def check_path(raw: str) -> CheckedPath:
    """Apply every path rule to ``raw`` (a name as the archive reports it) and report all it breaks."""
    problems: list[tuple[str, str]] = []
    if raw == "":
        return CheckedPath(raw, None, False, ((codes.PATH_INVALID, "an empty path"),))
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError:
        problems.append((codes.PATH_INVALID, "a path that is not valid UTF-8"))
        encoded = raw.encode("utf-8", "surrogatepass")
    if raw.startswith(("/", "\\")):
        problems.append((codes.PATH_ABSOLUTE, "an absolute path"))
    elif _DRIVE.match(raw):
        problems.append((codes.PATH_ABSOLUTE, "a path with a drive letter"))
    if any(part == ".." for part in re.split(r"[/\\]", raw)):
        problems.append((codes.PATH_TRAVERSAL, "a '..' component"))
    if "\x00" in raw:
        problems.append((codes.PATH_INVALID, "a NUL character in the path"))
    elif _has_control(raw):
        problems.append((codes.PATH_INVALID, "a control character in the path"))
    if "\\" in raw.lstrip("\\"):
        problems.append((codes.PATH_INVALID, "a backslash in the path"))
    if len(encoded) > MAX_PATH_BYTES:
        problems.append((codes.PATH_INVALID, f"a path of {len(encoded)} bytes, over {MAX_PATH_BYTES}"))
    raw_parts = raw.split("/")
    is_dir = raw_parts[-1] in ("", ".")
    parts = [p for p in raw_parts if p not in ("", ".")]
    normalised = "/".join(parts)
    if not normalised and raw.startswith(".") and is_dir:
        # Only "." components and "/": the directory the archive was made from (`tar -C dir .`). The format
        # folds "./" components, so this is the root, which every restore creates anyway.
        return CheckedPath(raw, "", True, tuple(problems))
    if not normalised:
        problems.append((codes.PATH_INVALID, "a path that names nothing after normalisation"))
        return CheckedPath(raw, None, is_dir, tuple(problems))
    return CheckedPath(raw, normalised, is_dir, tuple(problems))


def collision_key(normalised: str) -> str:
    """Two paths collide when their keys are equal: NFC, then case folding, then NFC again."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", normalised).casefold())


def in_state(normalised: str) -> bool:
    return normalised == "state" or normalised.startswith("state/")
