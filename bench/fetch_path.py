"""What a chunk's fetch thread spends on one page, by way of reading it: CPU of the calling thread for each page of a
demo-source data set, the ways alternated in one process.

- ``httpx``: httpx's own transport (httpcore and h11) under the deadline (``DeadlineTransport``), body read by
  ``read_bounded``;
- ``wire``: the source client's transport (``WireTransport``, http.client), the same ``read_bounded``;
- ``page, fields in decode``: the source hook's ``get_page`` (read, both decode passes) and the page check's UTF-8
  answer, as when the helper checks UTF-8 only;
- ``page, fields in helper``: ``get_page`` with its first pass only, and the helper reading the fields too;
- ``page, split in helper``: ``get_page`` with the helper finding the records in the body, checking them and reading
  their fields (how a chunk fetches while its helper runs).

The helper's own CPU is in its process and not counted. Needs the running stack (``dev/stack.py up``)::

    .venv/bin/python bench/fetch_path.py --pages 20 --rounds 8
    .venv/bin/python bench/fetch_path.py --latency 50
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import httpx

from crawlbench.environment import load_stack
from crawlbench.source import SourceAdmin, dataset_name

PAGE = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20, help="pages of 1,000 records a round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.0, help="ms the source adds to every request")
    args = parser.parse_args()

    from crawler_ops.config import SourceConfig
    from crawler_ops.crawl.page_check import PageChecker
    from crawler_ops.hooks.answers import read_bounded
    from crawler_ops.hooks.http import DeadlineTransport, deadline
    from crawler_ops.hooks.source.hook import SourceApiHook
    from crawler_ops.hooks.source.wire import WireTransport
    from crawler_ops.message.records import HeadReader

    stack = load_stack()
    admin = SourceAdmin(stack.source_url)
    name = dataset_name()
    admin.create(name, args.pages * PAGE, 0.3, PAGE)
    admin.set_latency(name, args.latency)
    fields = HeadReader(("aae397", "Collect_time"), "id").fields
    source = SourceConfig(conn_id="demo_source", page_path="/api/{task}/list", records_path="data.data")
    limits = httpx.Limits(max_connections=4)
    clients = {
        "httpx": httpx.Client(base_url=stack.source_url, transport=DeadlineTransport(False, limits), timeout=30),
        "wire": httpx.Client(base_url=stack.source_url, transport=WireTransport(False, 4), timeout=30),
    }
    in_decode, in_helper = SourceApiHook(source, name, name, fields), SourceApiHook(source, name, name, ())
    utf8_only, with_fields = PageChecker(name, ()), PageChecker(name, fields)
    splitter, split_hook = PageChecker(name, fields, source.records_path), SourceApiHook(source, name, name, ())
    split_hook.split = splitter.split

    def body(client: httpx.Client) -> Callable[[int], object]:
        def read(offset: int) -> object:
            with deadline(30), client.stream("GET", f"/api/{name}/list?offset={offset}&limit={PAGE}") as answer:
                return read_bounded(answer, 64 * 2**20, name)

        return read

    def page(hook: SourceApiHook, checker: PageChecker) -> Callable[[int], object]:
        def read(offset: int) -> object:
            checked = checker.checked(hook.get_page(offset, PAGE))
            assert checked.utf8_checked and checked.heads is not None, "the page was not checked, or has no fields"
            return checked

        return read

    ways = {
        "httpx": body(clients["httpx"]),
        "wire": body(clients["wire"]),
        "page, fields in decode": page(in_decode, utf8_only),
        "page, fields in helper": page(in_helper, with_fields),
        "page, split in helper": page(split_hook, splitter),
    }
    spent: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for round_ in range(args.rounds + 1):
            for way, read in ways.items():
                started = time.thread_time()
                for offset in range(0, args.pages * PAGE, PAGE):
                    read(offset)
                if round_:  # the first round warms connections and caches
                    spent[way].append((time.thread_time() - started) / args.pages * 1000)
    finally:
        for checker in (utf8_only, with_fields, splitter):
            checker.close()
        for client in clients.values():
            client.close()
    print(f"`bench/fetch_path.py --pages {args.pages} --rounds {args.rounds} --latency {args.latency:g}`\n")
    print("| way | CPU of the calling thread, ms a page (median) | × httpx | rounds |")
    print("|---|---:|---:|---|")
    base = statistics.median(spent["httpx"])
    for way, figures in spent.items():
        median = statistics.median(figures)
        print(f"| {way} | {median:.2f} | {median / base:.2f} | {', '.join(f'{f:.2f}' for f in figures)} |")


if __name__ == "__main__":
    main()
