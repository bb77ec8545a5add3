"""Compile the engine's hot modules with mypyc, in place, from the same source (docs/engine.md).

    python compile_engine.py     # `make venv` runs it (and again when engine/ changes); prints one line

The compiled modules sit beside their source (engine/<module>.<abi>.so, which Python imports before the .py)
with engine/compiled.sha256, the digest of the source they were built from: once that source changes, the
engine runs the source until this runs again (engine/compiled.py). Without a C compiler or Python's headers
it says so and leaves the engine pure Python: the same results, slower.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent
ENGINE = REPO / "engine"


def _rules() -> ModuleType:
    """engine/compiled.py (the modules compiled, the sources they depend on, the digest), read on its own."""
    spec = importlib.util.spec_from_file_location("engine_compiled", ENGINE / "compiled.py")
    assert spec is not None and spec.loader is not None  # noqa: S101
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compiler_missing() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h)"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "mypyc is not installed"
    return None


def remove_compiled() -> ModuleType:
    """Every compiled module in engine/ (this script builds all of them) and the digest of their source; returns
    engine/compiled.py."""
    for path in ENGINE.glob("*.so"):
        path.unlink()
    rules = _rules()
    (ENGINE / rules.DIGEST_FILE).unlink(missing_ok=True)
    return rules


def main() -> int:
    rules = remove_compiled()
    why = _compiler_missing()
    if why is not None:
        print(f"SKIPPED: the engine was not compiled ({why}); it runs as pure Python (same results, slower)")
        return 0
    started = time.perf_counter()
    built_from = rules.source_digest()  # before: a source changed while it compiles is not what was compiled
    with tempfile.TemporaryDirectory(prefix="engine-mypyc-") as tmp:
        # Its own mypy configuration: the project's own loads the Django plugins, which compiling does not need.
        config = Path(tmp) / "mypy.ini"
        config.write_text("[mypy]\npython_version = 3.11\nstrict = True\n")
        setup = Path(tmp) / "setup.py"
        setup.write_text(
            "from setuptools import setup\n"
            "from mypyc.build import mypycify\n"
            f"setup(name='engine-compiled', ext_modules=mypycify({['--config-file', str(config), *rules.COMPILED]!r},"
            " opt_level='3', group_name='engine.compiled_lib',"
            f" target_dir={str(Path(tmp) / 'c')!r}))\n"
        )
        build = ["build_ext", "--inplace", "--build-temp", f"{tmp}/temp", "--build-lib", f"{tmp}/lib"]
        proc = subprocess.run(  # noqa: S603  # this interpreter, on a script written just above
            [sys.executable, str(setup), *build],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        remove_compiled()
        print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
        print("FAILED: the engine could not be compiled (above); it runs as pure Python", file=sys.stderr)
        return 1
    (ENGINE / rules.DIGEST_FILE).write_text(built_from + "\n")
    names = ", ".join(Path(c).name for c in rules.COMPILED)
    print(f"compiled the engine ({names}) with mypyc in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
