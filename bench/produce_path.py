"""The chunk's produce path alone: pages of demo records filtered into messages (``records.build_messages``) and
published through the project's ``KafkaPublisher`` (send, then confirm: produce every message, flush, check the
reports) to a fresh topic of the dev stack's broker, with the project's producer settings, against the same settings
with a delivery report for every message (``delivery.report.only.error`` off). The two producers alternate, page set
by page set, in one process; the figure is the process's CPU (``time.process_time``: Python and librdkafka's threads)
per page, median of the rounds. Needs the running stack (``dev/stack.py up``).

Example::

    .venv/bin/python bench/produce_path.py --rounds 6 --pages 20
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "dev")]

from crawlbench.demo_pages import demo_pages  # noqa: E402
from crawlbench.environment import load_stack  # noqa: E402

PAGE = 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pages", type=int, default=20, help="pages of 1,000 records a round")
    args = parser.parse_args(argv)
    stack = load_stack()
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from crawler_ops.hooks.producer import KafkaPublisher
    from crawler_ops.planning import Batch
    from crawler_ops.records import build_messages
    from crawler_ops.results import RunCounts

    demo = demo_pages(args.pages, PAGE)
    messages = [
        build_messages(page, i * PAGE, demo.rule, demo.window, "id", demo.headers).messages
        for i, page in enumerate(demo.pages)
    ]
    topic = f"bench.produce_path.{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(15)
    settings = {**stack.producer_settings, "bootstrap.servers": stack.bootstrap}
    variants = {
        "every delivery reported": {**settings, "delivery.report.only.error": False},
        "failures only (the project's)": settings,
    }
    publishers = {label: KafkaPublisher(Producer(config), topic, "bench") for label, config in variants.items()}
    cpu: dict[str, list[float]] = {label: [] for label in variants}
    try:
        for publisher in publishers.values():  # connected, producer id acquired, before anything is timed
            publisher.send(Batch(0, PAGE), messages[0], RunCounts())
            publisher.confirm()
        for _ in range(args.rounds):
            for label, publisher in publishers.items():
                started = time.process_time()
                for index, page in enumerate(messages):
                    publisher.send(Batch(index * PAGE, (index + 1) * PAGE), page, RunCounts())
                    assert publisher.confirm() == len(page)
                cpu[label].append((time.process_time() - started) / len(messages) * 1000)
    finally:
        admin.delete_topics([topic])[topic].result(15)
    print(
        f"{len(messages)} pages of {PAGE} messages ({demo.record_bytes:.0f} bytes, {len(demo.headers)} headers), "
        f"{args.rounds} rounds alternated; process CPU ms a page:"
    )
    base = statistics.median(cpu["every delivery reported"])
    for label, figures in cpu.items():
        median = statistics.median(figures)
        print(f"  {label:32s} median {median:5.2f}  ×{median / base:.2f}  rounds {[round(f, 2) for f in figures]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
