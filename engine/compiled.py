"""The engine's hot modules may be compiled with mypyc from their own source (compile_engine.py, run by
`make venv`; docs/engine.md). Python imports a compiled module before its .py, so a compiled module built
from an older source would silently run old rules. Importing this module (the package does, first) sees to
it that the source is what runs then: the .py files, pure Python, with a warning. So does
``LOOPX_ENGINE_PURE=1`` in the environment, without the warning."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
# The modules compiled (the fold's hot path), as paths from the repository's root.
COMPILED = ("engine/assess.py", "engine/fold.py", "engine/canonical.py", "engine/parts.py")
# What a compiled module's code was built against: its own source and the engine modules it imports.
SOURCES = (*COMPILED, "engine/types.py", "engine/rewind.py")
DIGEST_FILE = "compiled.sha256"  # in engine/: the digest of SOURCES that the compiled modules were built from


def source_digest() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((HERE.parent / name).read_bytes())
    return h.hexdigest()


def compiled_modules() -> list[Path]:
    """The compiled modules present beside their source."""
    return [
        path
        for name in COMPILED
        for suffix in EXTENSION_SUFFIXES
        if (path := HERE.parent / (name.removesuffix(".py") + suffix)).exists()
    ]


class _SourceFirst(MetaPathFinder):
    """Finds the compiled modules' .py source before the import system finds the compiled module."""

    names = {name.removesuffix(".py").replace("/", "."): HERE.parent / name for name in COMPILED}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        source = self.names.get(fullname)
        return None if source is None else importlib.util.spec_from_file_location(fullname, source)


def why_pure() -> str | None:
    """Why the source must run though compiled modules are present (None: they may run, or there are none)."""
    found = compiled_modules()
    if not found:
        return None
    if os.environ.get("LOOPX_ENGINE_PURE") == "1":
        return "LOOPX_ENGINE_PURE=1"
    try:
        built_from = (HERE / DIGEST_FILE).read_text().strip()
    except OSError:
        built_from = ""
    if built_from != source_digest():
        warnings.warn(
            f"{found[0].name} was compiled from another source of the engine than the one beside it: the engine "
            "runs as pure Python until `make venv` compiles it again",
            RuntimeWarning,
            stacklevel=2,
        )
        return "stale"
    return None


def running() -> bool:
    """Whether the engine's modules that are imported run compiled (each of COMPILED, once imported)."""
    modules = [sys.modules.get(name) for name in _SourceFirst.names]
    return any(m is not None and str(m.__file__).endswith(tuple(EXTENSION_SUFFIXES)) for m in modules)


if why_pure() is not None and not any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
    sys.meta_path.insert(0, _SourceFirst())
