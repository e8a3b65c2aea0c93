"""Every HTTP client of the package reads its answers through one bounded read (crawler_ops.hooks.answers): a client
added later cannot forget it. Read from the source with :mod:`ast`, so the test needs nothing installed.

- every ``httpx.Client`` is built on a transport of the package (deadline-aware), never httpx's default one;
- no request is sent but by ``.stream(...)`` (httpx's ``.get``/``.post``/``.request`` read the whole body first);
- no answer is read by httpx's ``.json``, ``.text``, ``.content``, ``.read``, ``.iter_*`` outside hooks/answers.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "crawler_ops"
READER = PACKAGE / "hooks" / "answers.py"
SENDS = {"get", "post", "put", "patch", "delete", "request", "send", "head", "options"}
READS = {"json", "text", "content", "iter_bytes", "iter_raw", "iter_text", "iter_lines", "aread"}


def http_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "import httpx" in p.read_text() and p != READER)


def receiver(node: ast.expr) -> str:
    """The dotted name of what an attribute is read on (``self.client`` -> ``self.client``), '' when it is no name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = receiver(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def problems(text: str, name: str) -> list[str]:
    """What ``text`` (the module ``name``) does against the rules above."""
    tree = ast.parse(text)
    modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    found = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        call = node if isinstance(node, ast.Call) else None
        if call and receiver(call.func) == "httpx.Client" and not any(k.arg == "transport" for k in call.keywords):
            found.append(f"{where}: httpx.Client without a transport of the package")
        sent = call.func if call and isinstance(call.func, ast.Attribute) and call.func.attr in SENDS else None
        if sent and receiver(sent.value).lower().endswith("client"):
            found.append(f"{where}: {receiver(sent)}(...) reads the whole answer; send with .stream(...)")
        if isinstance(node, ast.Attribute) and node.attr in READS and receiver(node.value) not in modules:
            found.append(f"{where}: .{node.attr} reads an answer unbounded; use crawler_ops.hooks.answers")
    return found


@pytest.mark.parametrize("path", http_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_that_talks_http_reads_answers_only_through_the_bounded_read(path: Path) -> None:
    assert problems(path.read_text(), str(path.relative_to(PACKAGE))) == []


def test_the_check_sees_what_it_forbids() -> None:
    bad = "import httpx, msgspec\nclient = httpx.Client()\nanswer = client.get('/x')\ndata = answer.json()\n"
    found = problems(bad + "ok = msgspec.json.decode(b'1')\n", "probe.py")
    assert [f.split(": ", 1)[1] for f in found] == [
        "httpx.Client without a transport of the package",
        "client.get(...) reads the whole answer; send with .stream(...)",
        ".json reads an answer unbounded; use crawler_ops.hooks.answers",
    ]
