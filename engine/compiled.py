"""The engine's hot modules may be compiled with mypyc from their own source (compile_engine.py, run by
`make venv`; docs/engine.md). Python imports a compiled module before its .py, so a compiled module built
from an older source would silently run old rules: importing this module (the package does, first) refuses it."""

from __future__ import annotations

import hashlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The modules compiled (the fold's hot path), as paths from the repository's root.
COMPILED = ("engine/assess.py", "engine/fold.py", "engine/canonical.py")
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


def check() -> None:
    """Raise ImportError when a compiled module is present but its source changed after it was built."""
    found = compiled_modules()
    if not found:
        return
    try:
        built_from = (HERE / DIGEST_FILE).read_text().strip()
    except OSError:
        built_from = ""
    if built_from != source_digest():
        raise ImportError(
            f"{found[0].name} was compiled from another source of the engine than the one beside it: run "
            "`make venv` (or `python compile_engine.py`) to compile it again, or `python compile_engine.py "
            "--pure` to run pure Python"
        )


check()
