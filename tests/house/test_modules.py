"""Inside each package the modules keep the house's rules: no circle of imports, no private name taken from
another module, and no import hidden inside a function unless it waits for Django's app registry (a module
loaded before the apps are ready, such as Celery's app or a benchmark that sets Django up first) or is a
benchmark child's library, kept out of the floors it measures; its comment says which."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.house.tree import Import, imports, module_name, modules


def _all_imports(root: Path | None = None, packages: list[str] | None = None) -> list[Import]:
    if root is None:
        return [found for path in modules() for found in imports(path)]
    return [found for path in modules(root, packages) for found in imports(path, root, packages)]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_taken(found: list[Import]) -> list[str]:
    return sorted(
        f"{i.module}:{i.line} takes {name} from {i.target}"
        for i in found
        for name in i.names
        if _private(name) and i.target != i.module
    )


def hidden_imports(found: list[Import]) -> list[str]:
    return sorted(
        f"{i.module}:{i.line} imports {i.target} inside a function" for i in found if i.in_function and not i.marked
    )


def _resolve(target: str, known: set[str]) -> str | None:
    """The project module an import lands on: `from a.b import c` names module a.b.c when that is a module."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def circles(found: list[Import], known: set[str]) -> list[list[str]]:
    """Each circle of imports between modules of one package (its strongly connected components of more
    than one module), found by Tarjan's algorithm. An import that waits for the app registry is not an edge:
    it runs only once every module is loaded."""
    edges: dict[str, set[str]] = {module: set() for module in known}
    for i in found:
        if i.marked:
            continue
        targets = [_resolve(f"{i.target}.{name}", known) for name in i.names] or [_resolve(i.target, known)]
        for target in targets:
            inside = bool(target) and target != i.module and target.split(".")[0] == i.module.split(".")[0]
            # A package's __init__ imported by its own module is where Python starts anyway, not a circle.
            if inside and not i.module.startswith(f"{target}."):
                edges[i.module].add(str(target))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges[module]):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            connect(module)
    return sorted(components)


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import _helper\n")
    (package / "b.py").write_text(
        "def _helper() -> None:\n"
        "    from pkg import a\n"
        "def ready() -> None:\n"
        "    # waits for Django's app registry\n"
        "    from pkg import c\n"
    )
    (package / "c.py").write_text("")
    found = _all_imports(tmp_path, ["pkg"])
    assert private_names_taken(found) == ["pkg.a:1 takes _helper from pkg.b"]
    assert hidden_imports(found) == ["pkg.b:2 imports pkg inside a function"]
    known = {module_name(path, tmp_path) for path in modules(tmp_path, ["pkg"])}
    assert circles(found, known) == [["pkg.a", "pkg.b"]]


def test_no_private_name_is_taken_from_another_module() -> None:
    assert private_names_taken(_all_imports()) == []


def test_no_import_hides_in_a_function_without_its_reason() -> None:
    assert hidden_imports(_all_imports()) == []


def test_no_circle_of_imports_inside_a_package() -> None:
    known = {module_name(path) for path in modules()}
    assert len(known) > 100  # the tree was read
    assert circles(_all_imports(), known) == []


def test_no_function_is_over_100_lines() -> None:
    """A function a person can hold in their head: over a hundred lines, a part of it wants a name."""
    long = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > 100:
                    long.append(f"{module_name(path)}.{node.name}: {lines} lines")
    assert long == []


def test_the_database_vendor_is_asked_in_one_module() -> None:
    """Which database this is, is asked of kernel/dialect.py alone (``on_postgresql``, ``postgres_only``);
    the store is chosen there once, and migrations ask through it. Anything else reads the same code on both."""
    askers = sorted(
        f"{module_name(path)}:{number}"
        for path in modules()
        if module_name(path) != "kernel.dialect"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if not line.lstrip().startswith("#") and (".vendor" in line or "on_postgresql(" in line)
    )
    assert len(askers) <= 4, askers
