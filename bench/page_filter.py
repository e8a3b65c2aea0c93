"""The page filter (``crawler_ops.message.records.build_messages``) of a git revision against the work tree's, in one
process: 40 demo-source pages of 500 records (every record kept, published as sent, key field ``id``), the two
versions interleaved, CPU seconds (``time.process_time``), the best of ``--rounds``. Needs no stack.

``--as-chunk`` filters the pages as a chunk does: found UTF-8 by the page check's helper (so not checked record by
record) and with a task's default message shape, whose timestamp is the record's date.

Example::

    .venv/bin/python bench/page_filter.py --base main --rounds 15
    .venv/bin/python bench/page_filter.py --base HEAD --as-chunk
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "dev")]

from crawlbench.demo_pages import demo_pages  # noqa: E402

PAGES, PAGE = 40, 500


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="the git revision to compare with (default HEAD)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--as-chunk", action="store_true", help="pages checked for UTF-8, record-date timestamps")
    args = parser.parse_args()
    text = subprocess.run(
        ["git", "show", f"{args.base}:plugins/crawler_ops/message/records.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "records_base.py").write_bytes(text)
        versions = {"base": load("records_base", Path(folder) / "records_base.py")}
    versions["work tree"] = load("records_work", REPO / "plugins" / "crawler_ops" / "records.py")
    demo = demo_pages(PAGES, PAGE)
    pages, rule, window, headers = demo.pages, demo.rule, demo.window, demo.headers
    records, size = demo.records, demo.record_bytes
    key: Any = "id"
    paged = dict.fromkeys(versions, pages)
    if args.as_chunk:
        from crawler_ops.config import KafkaConfig

        key = KafkaConfig(topic="bench", key_field="id").shape
        paged = {label: [checked(module.Page(page)) for page in pages] for label, module in versions.items()}
    best = dict.fromkeys(versions, float("inf"))
    for _ in range(args.rounds):
        for label, module in versions.items():
            started = time.process_time()
            kept = sum(
                module.build_messages(page, i * PAGE, rule, window, key, headers).kept
                for i, page in enumerate(paged[label])
            )
            best[label] = min(best[label], time.process_time() - started)
            assert kept == records, f"{label}: {kept} of {records} kept"
    base, work = (best[label] / records * 1e6 for label in versions)
    print(
        f"{records} records of {size:.0f} bytes: {args.base} {base:.3f} us a record, work tree {work:.3f} us a "
        f"record, ratio {work / base:.3f}"
    )


def checked(page: Any) -> Any:
    """``page`` as the page check leaves a page it found UTF-8."""
    page.utf8_checked = True
    return page


if __name__ == "__main__":
    main()
