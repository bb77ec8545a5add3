"""The layers contract (.importlinter) holds on the tree, and it fails the moment a lower layer imports a
higher one. Both are checked on a copy of the packages, so the probe never touches the working tree."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.engine.helpers import PYTHON, REPO_ROOT

LINT_IMPORTS = Path(PYTHON).with_name("lint-imports")


def _root_packages() -> list[str]:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / ".importlinter", encoding="utf-8")
    return config["importlinter"]["root_packages"].split()


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in _root_packages():
        shutil.copytree(REPO_ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / ".importlinter", tree / ".importlinter")
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: import-linter is a dev dependency (pyproject.toml)")
    return _copy(tmp_path)


def test_every_package_of_the_project_is_in_the_contract() -> None:
    packages = {p.name for p in REPO_ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"}
    assert packages == set(_root_packages())


def test_the_tree_keeps_the_layers(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("engine", "kernel"),
        ("kernel", "journals"),
        ("journals", "trail"),
        ("trail", "recovery"),
        ("recovery", "audits"),
        ("journals", "console"),
        ("recovery", "ops"),
    ],
)
def test_an_upward_import_breaks_the_contract(tree: Path, low: str, high: str) -> None:
    (tree / low / "upward_probe.py").write_text(f"import {high}\n", encoding="utf-8")
    result = _lint(tree)
    assert result.returncode != 0
    assert f"{low} is not allowed to import {high}" in result.stdout
    assert f"{low}.upward_probe -> {high}" in result.stdout


def test_the_contract_ignores_no_import() -> None:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / ".importlinter", encoding="utf-8")
    assert "ignore_imports" not in config["importlinter:contract:layers"]


def test_an_ignored_import_that_does_not_exist_breaks_the_contract(tree: Path) -> None:
    """An exception for an import that is not there would hide the next real one: the linter refuses it."""
    config = tree / ".importlinter"
    config.write_text(
        config.read_text(encoding="utf-8") + "ignore_imports =\n    engine.fold -> journals.models\n",
        encoding="utf-8",
    )
    result = _lint(tree)
    assert result.returncode != 0
    assert "engine.fold -> journals.models" in result.stdout + result.stderr


def _circle(packages: list[str], edges: set[tuple[str, str]]) -> list[str]:
    """The packages left on a cycle once every package that imports none of the others is peeled away, in
    rounds; empty when the graph is acyclic."""
    remaining = set(packages)
    while remaining:
        leaves = {p for p in remaining if not any((p, q) in edges for q in remaining)}
        if not leaves:
            return sorted(remaining)
        remaining -= leaves
    return []


def test_the_circle_check_finds_a_circle() -> None:
    assert _circle(["a", "b", "c"], {("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c"]
    assert _circle(["a", "b", "c"], {("a", "b"), ("b", "c")}) == []


def test_no_import_circle_among_the_packages() -> None:
    """The package graph (an edge where any module of one imports any module of the other) is acyclic."""
    import grimp

    packages = _root_packages()
    graph = grimp.build_graph(*packages, cache_dir=None)
    edges = {
        (a, b)
        for a in packages
        for b in packages
        if a != b and graph.direct_import_exists(importer=a, imported=b, as_packages=True)
    }
    assert len(edges) >= len(packages) - 1  # the graph was read: every layer but the engine imports another
    assert not _circle(packages, edges), f"import circle among {_circle(packages, edges)}"
