"""The modules of dev/ import one another without a circle, and every name the tests, bench/ and dev/ read from a
dev/ module is there.

How: every ``dev/*.py`` and every module of a folder below dev/ is parsed with ``ast`` (nothing is imported), each
``import``/``from ... import`` anywhere in it (a function's lazy import too: that is how ``stack.py`` and
``kafka_cluster.py`` once imported each other) that names another dev/ module is an edge, and the graph's strongly
connected components are searched for one with more than one module or a module importing itself.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "dev"
Graph = dict[str, set[str]]


def dev_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` as ``root`` on sys.path sees it (``stack``,
    ``demo_source.app``); a package's ``__init__.py`` is the package's own name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if "__pycache__" in parts or any(part.startswith(".") for part in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = path
    return modules


def imported_names(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names an ``import`` or ``from`` statement anywhere in ``tree`` may load, relative ones resolved
    (``from X import Y`` yields ``X.Y`` too: Y may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                base = ".".join([*anchor, *([base] if base else [])])
            if base:
                yield base
            yield from (f"{base}.{alias.name}" if base else alias.name for alias in node.names)


def resolve(name: str, importer: str, modules: dict[str, Path], root: Path) -> str | None:
    """The dev/ module ``name`` loads when ``importer`` imports it: the longest known prefix of ``name``; a file in
    a folder without ``__init__.py`` (run as a script) sees its own folder first."""
    folder = importer.rpartition(".")[0]
    script_folder = folder and not (root.joinpath(*folder.split(".")) / "__init__.py").exists()
    candidates = [f"{folder}.{name}", name] if script_folder else [name]
    for candidate in candidates:
        parts = candidate.split(".")
        for end in range(len(parts), 0, -1):
            prefix = ".".join(parts[:end])
            if prefix in modules:
                return prefix
    return None


def import_graph(root: Path) -> Graph:
    """Who imports whom among the modules under ``root``."""
    modules = dev_modules(root)
    graph: Graph = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for imported in imported_names(tree, name, path.name == "__init__.py"):
            target = resolve(imported, name, modules, root)
            # ``from . import n`` in a package's module names the package too: that is not an edge to its
            # __init__ (nor is a package's __init__ naming itself); a module importing itself is.
            if target is None or name.startswith(f"{target}.") or (target == name and path.name == "__init__.py"):
                continue
            graph[name].add(target)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through every strongly connected component that has one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [cycle_in(graph, component) for component in components]


def cycle_in(graph: Graph, component: set[str]) -> list[str]:
    """The shortest way from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(graph: Graph) -> str:
    return "\n".join(f"  {name} -> {', '.join(sorted(graph[name])) or '-'}" for name in sorted(graph))


def test_nothing_in_dev_imports_in_a_circle():
    graph = import_graph(DEV)
    found = cycles(graph)

    assert not found, "import cycles in dev/:\n" + "\n".join(" -> ".join(c) for c in found) + "\n" + describe(graph)


def test_the_graph_sees_the_stacks_imports_lazy_ones_too():
    graph = import_graph(DEV)

    assert {"stack_common", "kafka_server", "postgres_stack", "airflow_stack", "kafka_cluster"} <= graph["stack"]
    assert graph["kafka_cluster"] >= {"stack_common", "kafka_server"} and "stack" not in graph["kafka_cluster"]
    assert graph["stack_common"] <= {"pg_server", "celery_stack"}, "the bottom of the stack modules"
    assert "demo_source.data" in graph["demo_source.app"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"a.py": "import b\n", "b.py": "def f():\n    from a import x\n"}, [["a", "b", "a"]]),
        ({"a.py": "import b\n", "b.py": "import c\n", "c.py": "from a import x\n"}, [["a", "b", "c", "a"]]),
        ({"p/__init__.py": "", "p/m.py": "from . import n\n", "p/n.py": "from .m import x\n"}, [["p.m", "p.n", "p.m"]]),
        ({"s/run.py": "import helper\n", "s/helper.py": "import run\n"}, [["s.helper", "s.run", "s.helper"]]),
        ({"a.py": "import b\nimport os\n", "b.py": "import c\n", "c.py": "x = 1\n"}, []),
        ({"p/__init__.py": "from p.m import x\n", "p/m.py": "from p.n import y\n", "p/n.py": ""}, []),
    ],
    ids=["lazy-pair", "triangle", "relative-in-package", "script-folder", "chain", "package-init"],
)
def test_the_check_finds_a_cycle_where_there_is_one(tmp_path: Path, files: dict[str, str], expected: list[list[str]]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    assert cycles(import_graph(tmp_path)) == expected


def names_read_from_dev_modules() -> Iterator[tuple[Path, str, str]]:
    """(file, dev module, name) for every ``module.name`` and ``from module import name`` in tests/, bench/ and
    dev/ that reads a dev/ module imported under a plain or ``as`` name (``import stack as devstack``), also when
    the alias is imported from the file that made it (``from crawlbench.environment import devstack``)."""
    modules = dev_modules(DEV)
    files = [p for folder in ("tests", "bench", "dev") for p in sorted((REPO / folder).rglob("*.py"))]
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in files}
    shared = {}  # `import stack as devstack` makes devstack importable from that file
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                shared |= {a.asname: a.name for a in node.names if a.asname and a.name in modules}
    for path, tree in trees.items():
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {(a.asname or a.name): a.name for a in node.names if a.name in modules and "." not in a.name}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                if node.module in modules:
                    names = [a.name for a in node.names if f"{node.module}.{a.name}" not in modules]
                    yield from ((path, node.module, name) for name in names)
                bound |= {(a.asname or a.name): shared[a.name] for a in node.names if a.name in shared}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                yield path, bound[node.value.id], node.attr


def test_every_name_read_from_a_dev_module_is_there():
    missing = sorted(
        f"{path.relative_to(REPO)}: {module}.{name}"
        for path, module, name in set(names_read_from_dev_modules())
        if not hasattr(importlib.import_module(module), name)
    )

    assert not missing, "names no dev/ module holds any more (import them from the module that defines them):\n" + (
        "\n".join(missing)
    )
