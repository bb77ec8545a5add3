"""The engine's compiled modules (engine/compiled.py, docs/engine.md): what runs is always the source beside
them, compiled from it or the source itself."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine import compiled
from tests.engine.helpers import PYTHON, REPO_ROOT

SHOW = (
    "import sys, warnings; warnings.simplefilter('always'); import engine, engine.compiled as c; "
    "print(sys.modules['engine.assess'].__file__, c.running())"
)


def _run(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "LOOPX_ENGINE_PURE"}
    return subprocess.run(
        [PYTHON, "-c", SHOW], cwd=cwd, env={**clean, **env}, capture_output=True, text=True, check=True
    )


def test_loopx_engine_pure_runs_the_source() -> None:
    out = _run(REPO_ROOT, LOOPX_ENGINE_PURE="1").stdout.split()
    assert out == [str(REPO_ROOT / "engine" / "assess.py"), "False"]


def test_the_compiled_modules_run_when_they_were_built_from_this_source() -> None:
    if not compiled.compiled_modules():
        pytest.skip("the engine is not compiled here (no C compiler when the venv was made)")
    assert (compiled.HERE / compiled.DIGEST_FILE).read_text().strip() == compiled.source_digest()
    assert _run(REPO_ROOT).stdout.split()[1] == "True"


def test_a_compiled_module_of_another_source_gives_way_to_the_source(tmp_path: Path) -> None:
    if not compiled.compiled_modules():
        pytest.skip("the engine is not compiled here (no C compiler when the venv was made)")
    shutil.copytree(REPO_ROOT / "engine", tmp_path / "engine")
    (tmp_path / "engine" / "rewind.py").write_text((REPO_ROOT / "engine" / "rewind.py").read_text() + "\n# changed\n")
    proc = _run(tmp_path)
    assert proc.stdout.split() == [str(tmp_path / "engine" / "assess.py"), "False"]
    assert "runs as pure Python until `make venv` compiles it again" in proc.stderr
