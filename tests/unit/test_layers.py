"""The package's layering: imports only go down, and no module imports itself in a circle.

Layers, bottom to top: the pure core (the modules at the package root, ``config`` and ``message``), ``hooks`` (in
three sub-layers: ``hooks.store`` and the shared ``hooks.http`` and ``hooks.answers``; ``hooks.kafka``;
``hooks.source``, whose rate limits and shared tokens live in the crawler database), ``telemetry``, ``crawl`` and
``executor`` (side by side, neither importing the other), ``ops``, ``migration``, ``operators`` (the steps as
operators a DAG uses), ``factory`` and the CLI (``__main__``). Every import counts, the ones inside functions too: a
lazy import is still a dependency. The graph is read from the source with :mod:`ast`, so the test needs nothing
installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "crawler_ops"

# Subpackage -> rank; modules at the root (and the config and message packages) are rank 0. Equal ranks in different
# groups may not import each other.
RANKS = {
    "hooks": 1,
    "telemetry": 2,
    "crawl": 3,
    "executor": 3,
    "ops": 4,
    "migration": 5,
    "triggers": 5,
    "operators": 6,
    "factory": 7,
}
# The folders of ``hooks``, one per system, ranked within it; the modules at its root (``hooks.http``) share the
# lowest sub-layer with the store.
HOOK_RANKS = {"store": 1.0, "kafka": 1.2, "source": 1.4}
CLI_RANK = 8
# A deprecated alias at its old root path re-exports the moved module.
ALIASES = {"crawler_ops.webhook": "crawler_ops.telemetry.webhook"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def rank(module: str) -> tuple[int, str]:
    """The module's layer and the group it belongs to (imports within a group are free of the rank rule)."""
    parts = module.split(".")
    if module in ALIASES:
        return rank(ALIASES[module])
    if len(parts) > 1 and parts[1] == "__main__":
        return CLI_RANK, "cli"
    if len(parts) > 3 and parts[1] == "hooks" and parts[2] in HOOK_RANKS:
        return HOOK_RANKS[parts[2]], f"hooks.{parts[2]}"
    if len(parts) > 2 and parts[1] in RANKS:
        return RANKS[parts[1]], parts[1]
    if len(parts) > 1 and parts[1] in RANKS:  # the subpackage's own __init__
        return RANKS[parts[1]], parts[1]
    return 0, "core"


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package modules ``path`` imports, anywhere in the file (``from crawler_ops import x`` names x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # a submodule when one has that name, else a name defined in the module itself
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in known else node.module for name in names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != "crawler_ops":
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {module: imports_of(path, set(files)) - {module} for module, path in files.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        low, group = rank(module)
        for target in sorted(targets):
            high, target_group = rank(target)
            if target_group != group and high >= low and not target.startswith(module + "."):
                wrong.append(f"{module} (layer {group}) imports {target} (layer {target_group})")
    return wrong


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Modules collapsed into their subpackage: a cycle between packages is a layering defect too."""

    def group(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else module

    collapsed: dict[str, set[str]] = {}
    for module, targets in graph.items():
        collapsed.setdefault(group(module), set()).update(group(t) for t in targets if group(t) != group(module))
    return collapsed


def test_imports_only_go_down_the_layers() -> None:
    graph = import_graph()
    assert len(graph) > 40, "the package was not found"
    assert upward_imports(graph) == []


def test_no_module_imports_itself_in_a_circle() -> None:
    assert find_cycle(import_graph()) is None


def test_no_subpackage_imports_itself_in_a_circle() -> None:
    assert find_cycle(package_graph(import_graph())) is None


def test_the_core_does_not_import_airflow_at_module_level() -> None:
    """The pure core is unit-tested without Airflow; Airflow only inside the functions that need it."""
    offenders = []
    for path in PACKAGE.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "airflow"]
    assert offenders == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"crawler_ops.planning": {"crawler_ops.crawl.plan"}}, True),
        ({"crawler_ops.crawl.chunk": {"crawler_ops.executor.worker"}}, True),
        ({"crawler_ops.hooks.store.hook": {"crawler_ops.ops.status"}}, True),
        ({"crawler_ops.crawl.chunk": {"crawler_ops.crawl.ledger", "crawler_ops.hooks.store.hook"}}, False),
        ({"crawler_ops.factory.crawl": {"crawler_ops.crawl.plan"}}, False),
        ({"crawler_ops.hooks.store.db": {"crawler_ops.hooks.source.auth"}}, True),
        ({"crawler_ops.hooks.kafka.registry": {"crawler_ops.hooks.source.hook"}}, True),
        ({"crawler_ops.hooks.source.tokens": {"crawler_ops.hooks.store.db", "crawler_ops.hooks.http"}}, False),
    ],
    ids=[
        "core-imports-crawl",
        "crawl-imports-executor",
        "hooks-import-ops",
        "down-and-within",
        "factory-down",
        "store-imports-source",
        "kafka-imports-source",
        "source-down-to-store",
    ],
)
def test_the_layer_check_sees_an_upward_import(graph: dict[str, set[str]], expected: bool) -> None:
    assert bool(upward_imports(graph)) is expected


def test_the_cycle_check_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_longer_than_500_lines_and_the_chunk_loop_reads_in_one_screen() -> None:
    """Size bounds that keep the house walkable. One idea a module, and most modules take 50-300 lines to say it;
    past 500 a module of this package has always held two ideas, so it is split by idea, not trimmed to fit. A class
    may be as long as its module allows: its methods stay with it rather than move out as functions to save lines."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > 500:
            long.append(f"{path.relative_to(PACKAGE)} ({lines} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and path.name == "chunk.py" and node.name == "crawl":
                length = (node.end_lineno or 0) - node.lineno + 1
                assert length <= 30, f"ChunkCrawler.crawl() is {length} lines"
    assert long == []


def functions_taking_their_modules_class(source: str) -> list[str]:
    """The top-level functions of ``source`` whose first parameter is annotated with a class defined at the top level
    of the same module (by name, or by name in a string): ``function(Class)`` for each."""
    tree = ast.parse(source)
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = [*node.args.posonlyargs, *node.args.args]
        annotation = params[0].annotation if params else None
        if isinstance(annotation, ast.Name):
            name = annotation.id
        elif isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            name = annotation.value
        else:
            continue
        if name in classes:
            found.append(f"{node.name}({name})")
    return found


def test_no_module_function_takes_its_own_modules_class_first() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)}: {function}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for function in functions_taking_their_modules_class(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "each should be a method of the class its first parameter is"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("class A: pass\ndef f(a: A) -> None: ...", ["f(A)"]),
        ("class A: pass\nasync def f(a: 'A', b: int) -> None: ...", ["f(A)"]),
        ("class A: pass\ndef f(b: int, a: A) -> None: ...", []),
        ("class A:\n    def f(self, a: 'A') -> None: ...", []),
        ("from m import A\ndef f(a: A) -> None: ...", []),
        ("class A: pass\ndef f(a) -> None: ...", []),
    ],
    ids=["first-parameter", "async-string-annotation", "not-first", "method", "imported-class", "unannotated"],
)
def test_the_method_check_sees_a_function_that_takes_its_modules_class(source: str, expected: list[str]) -> None:
    assert functions_taking_their_modules_class(source) == expected
