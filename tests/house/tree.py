"""The project's packages as the layers contract names them, and the imports each module makes, read from
the source (functions included), for the house tests."""

from __future__ import annotations

import ast
import configparser
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.engine.helpers import REPO_ROOT

# A function-level import is allowed only to wait for Django's app registry (the module is loaded before the
# apps are ready), or in a benchmark's child process whose floors must be measured without the library loaded;
# its line, or a comment in the run of comment and import lines just above it, says so with these words.
REASONS = ("app registry", "loaded only where measured")


def root_packages() -> list[str]:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / ".importlinter", encoding="utf-8")
    return config["importlinter"]["root_packages"].split()


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported from (absolute)
    names: tuple[str, ...]  # the names taken (empty for `import x`)
    line: int
    in_function: bool
    marked: bool  # the line or the comment above it gives one of REASONS


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules(root: Path = REPO_ROOT, packages: list[str] | None = None) -> Iterator[Path]:
    for package in packages if packages is not None else root_packages():
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def imports(path: Path, root: Path = REPO_ROOT, packages: list[str] | None = None) -> list[Import]:
    """Every import of a project module in the file, with whether it sits inside a function."""
    own = set(packages if packages is not None else root_packages())
    name = module_name(path, root)
    is_package = path.name == "__init__.py"
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[Import] = []

    def marked(line: int) -> bool:
        """The import's line, or the run of comment and import lines just above it, gives one of the reasons."""
        number = line - 1
        if any(reason in lines[number] for reason in REASONS):
            return True
        while number > 0:
            number -= 1
            above = lines[number].strip()
            if not above.startswith(("#", "from ", "import ")):
                return False
            if above.startswith("#") and any(reason in above for reason in REASONS):
                return True
        return False

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom):
                target = child.module or ""
                if child.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join([*base, target] if target else base)
                if target.split(".")[0] in own:
                    names = tuple(alias.name for alias in child.names)
                    found.append(Import(name, target, names, child.lineno, in_function, marked(child.lineno)))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] in own:
                        found.append(Import(name, alias.name, (), child.lineno, in_function, marked(child.lineno)))
            visit(child, inner)

    visit(ast.parse(source), False)
    return found
