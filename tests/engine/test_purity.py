"""The engine is plain Python: no module in engine imports Django (docs/engine.md). Checked twice:
statically over the source, and by importing and running it in a process where Django cannot be imported."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from tests.engine.helpers import PYTHON, REPO_ROOT

ENGINE = REPO_ROOT / "engine"
IMPORTERS = REPO_ROOT / "recovery" / "imports" / "importers"  # beside the engine, held to the same rule
MODULES = sorted(ENGINE.rglob("*.py"))
IMPORTER_MODULES = sorted(IMPORTERS.rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module name, relative level) of every import in the file, wherever it is (functions too)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            found.append((ast.unparse(node.args[0]) if node.args else "", 0))
    return found


def test_the_engine_has_modules_to_check() -> None:
    names = {p.name for p in MODULES}
    assert {"__init__.py", "assess.py", "canonical.py", "fold.py", "types.py", "writer.py"} <= names


FRAMEWORKS = {"django", "rest_framework", "celery"}
PROJECT = {p.name for p in REPO_ROOT.iterdir() if (p / "__init__.py").exists()}


def _offenders(paths: list[Path], allowed: tuple[str, ...]) -> list[tuple[str, str]]:
    offenders = []
    for path in paths:
        for module, level in _imports(path):
            top = module.split(".")[0]
            if top in PROJECT and not module.startswith(allowed) or "django" in module or top in FRAMEWORKS:
                offenders.append((path.name, module))
            if level > 1:
                offenders.append((path.name, f"{'.' * level}{module}"))  # reaches outside its package
    return offenders


def test_no_engine_module_imports_django_or_the_rest_of_the_project() -> None:
    assert _offenders(MODULES, ("engine",)) == []


def test_no_importer_module_imports_django_or_more_than_the_engine() -> None:
    assert {p.name for p in IMPORTER_MODULES} >= {
        "__init__.py",
        "temporal.py",
        "langgraph.py",
        "stepfunctions.py",
        "dbos.py",
    }
    assert _offenders(IMPORTER_MODULES, ("engine", "recovery.imports.importers")) == []


BLOCKED = """
import sys
sys.modules["django"] = None  # any `import django...` now raises ImportError
import pkgutil, importlib
import engine as engine
import recovery.imports.importers as importers
for info in pkgutil.walk_packages(engine.__path__, "engine."):
    importlib.import_module(info.name)
for info in pkgutil.walk_packages(importers.__path__, "recovery.imports.importers."):
    importlib.import_module(info.name)
history = b'{"events":[{"eventId":1,"eventType":"WorkflowExecutionStarted","eventTime":"2026-01-01T00:00:00Z",' \
    b'"workflowExecutionStartedEventAttributes":{"workflowType":{"name":"W"}}}]}'
imported = importers.history_import(source="temporal", data=history, effects=importers.effect_map_parse({}))
assert [t.resume_from for t in engine.assess(imported.runs[0].journal.split(b"\\n")[:-1]).turns] == ["close"]
from engine.writer import JournalWriter
w = JournalWriter("r")
w.plan("t1")
w.commit("t1", "plan")
w.checkpoint(with_state=True)
result = engine.assess(w.lines)
assert [t.resume_from for t in result.turns] == ["envelope"], result
tops = {"django", "rest_framework"}
loaded = sorted(m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] in tops)
assert loaded == [], loaded
print("ok")
"""


def test_the_engine_imports_and_runs_with_django_blocked() -> None:
    proc = subprocess.run(
        [PYTHON, "-c", BLOCKED], cwd=REPO_ROOT, capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin"}
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"ok\n", b"")
