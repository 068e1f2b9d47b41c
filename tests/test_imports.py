"""The import graph of ``sdyn/``, built from the source with :mod:`ast`: it has no cycle, nothing
in the package imports the command line ``sdyn.sweep`` (only ``python -m sdyn.sweep`` and tests
run it), and no module takes a private name (``_x``) from another.

Every ``import`` and ``from ... import`` statement counts, wherever it stands: at module level,
inside a function (a deferred import still runs, only later; a cycle through it still means two
modules that each need the other), and under ``if TYPE_CHECKING`` (a reader follows it like any
other). An edge goes to the module named, and to the submodule where ``from package import name``
names one. ``SDYN`` (the environment variable) points the checks at another tree's ``sdyn/``.
"""

import ast
import os
from pathlib import Path

ROOT = Path(os.environ.get("SDYN", Path(__file__).resolve().parent.parent / "sdyn"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in ROOT.rglob("*.py")}


MODULES = _modules()


def _imports(name: str, tree: ast.Module):
    """(module imported, names taken from it, the statement) for each import statement in
    ``tree``, with relative imports resolved against the module ``name``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node
        elif isinstance(node, ast.ImportFrom):
            yield _from(name, node), [a.name for a in node.names], node


def _from(name: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement in module ``name`` names, made absolute."""
    if not node.level:
        return node.module
    package = (name if _is_package(name) else name.rpartition(".")[0]).split(".")
    return ".".join([*package[: len(package) - node.level + 1], *filter(None, [node.module])])


def _is_package(name: str) -> bool:
    return (ROOT.parent / name.replace(".", "/") / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of ``sdyn`` it imports."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, tree in MODULES.items():
        for module, taken, _ in _imports(name, tree):
            targets = [module, *(f"{module}.{t}" for t in taken)]
            graph[name] |= {t for t in targets if t in MODULES and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            component.append(v)
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_the_package_is_found():
    assert {"sdyn", "sdyn.sweep", "sdyn.driver", "sdyn.api"} <= set(MODULES), sorted(MODULES)


def test_the_import_graph_has_no_cycle():
    cycles = _cycles(_graph())
    assert cycles == [], "modules that import each other: " + "; ".join(map(" <-> ".join, cycles))


def test_a_cycle_is_found():
    """The checker itself: a cycle of three, and a module importing itself is no cycle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_nothing_in_the_package_imports_the_command_line():
    found = [
        f"{name}:{node.lineno}"
        for name, tree in MODULES.items()
        for module, taken, node in _imports(name, tree)
        if name != "sdyn.sweep" and "sdyn.sweep" in (module, *(f"{module}.{t}" for t in taken))
    ]
    assert found == [], f"sdyn.sweep imported at {', '.join(found)}"


def _private_names_taken(name: str, tree: ast.Module) -> list[str]:
    """The private names (``_x``, not ``__x__``) module ``name`` takes from another module of
    ``sdyn``: imported (``from m import _x``), or read off a module it imported (``m._x``)."""
    found, bound = [], {}  # bound: local name -> the module of sdyn it stands for
    for module, taken, node in _imports(name, tree):
        if module.partition(".")[0] == "sdyn":
            found += [f"{module}.{t} (line {node.lineno})" for t in taken if _private(t)]
        for alias in node.names:
            full = f"{module}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.name
            if full in MODULES and (alias.asname or "." not in alias.name):
                bound[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and bound.get(node.value.id, name) != name
        ):
            found.append(f"{bound[node.value.id]}.{node.attr} (line {node.lineno})")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def test_no_module_takes_a_private_name_from_another():
    found = {name: _private_names_taken(name, tree) for name, tree in MODULES.items()}
    found = [f"{name}: {', '.join(names)}" for name, names in found.items() if names]
    assert found == [], "private names taken:\n" + "\n".join(found)


def test_a_private_name_taken_is_found():
    """The checker itself, on a module that imports one private name and reads another."""
    tree = ast.parse("from sdyn.sweep import plan, _one_line\nfrom sdyn import driver as d\nd._x()")
    assert _private_names_taken("sdyn.report", tree) == [
        "sdyn.sweep._one_line (line 1)",
        "sdyn.driver._x (line 3)",
    ]
