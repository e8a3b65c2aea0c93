"""The cost of field drift profiling (``crawler_ops.drift.profile_values``) next to the page filter's
(``crawler_ops.message.records.build_messages``), in one process: 40 demo-source pages of 500 records (every record
kept, published as sent, key field ``id``), CPU seconds (``time.process_time``), the best of ``--rounds``. Needs no
stack.

Prints the cost of profiling a record (every record profiled), the filter's cost of a record, and what profiling
adds per published record when it samples ``--sample`` records a page, for pages of 100 (the default batch_size)
and 500 records.

Example::

    .venv/bin/python bench/drift_bench.py --rounds 9
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "dev")]

from crawlbench.demo_pages import demo_pages  # noqa: E402
from crawler_ops.drift import SAMPLE_PER_PAGE, profile_values  # noqa: E402
from crawler_ops.message.records import build_messages  # noqa: E402

PAGES, PAGE = 40, 500


def best_of(rounds: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sample", type=int, default=SAMPLE_PER_PAGE, help="records profiled per page")
    args = parser.parse_args()
    demo = demo_pages(PAGES, PAGE)
    pages, rule, window, headers = demo.pages, demo.rule, demo.window, demo.headers
    records, size = demo.records, demo.record_bytes
    published = [[m.value for m in build_messages(p, 0, rule, window, "id", headers).messages] for p in pages]
    assert sum(map(len, published)) == records

    def filter_pages() -> None:
        for i, page in enumerate(pages):
            build_messages(page, i * PAGE, rule, window, "id", headers)

    def profile_all() -> None:
        for values in published:
            profile_values(values, None)

    filtering = best_of(args.rounds, filter_pages) / records * 1e6
    profiling = best_of(args.rounds, profile_all) / records * 1e6
    print(f"{records} records of {size:.0f} bytes, 9 top-level fields, best of {args.rounds} rounds:")
    print(f"  filter + key + encode (build_messages): {filtering:.3f} us a record")
    print(f"  drift profile, every record profiled:   {profiling:.3f} us a profiled record")
    for page_size in (100, 500):
        sampled = min(args.sample, page_size)

        def profile_sampled(page_size: int = page_size) -> None:
            for values in published:
                for lo in range(0, PAGE, page_size):
                    profile_values(values[lo : lo + page_size], args.sample)

        per_record = best_of(args.rounds, profile_sampled) / records * 1e6
        print(
            f"  drift profile, {sampled} sampled of a page of {page_size}: {per_record:.3f} us a published record "
            f"({100 * per_record / filtering:.0f}% of the filter's cost)"
        )


if __name__ == "__main__":
    main()
