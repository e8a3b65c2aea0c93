"""The chunk's produce path alone: pages of demo records filtered into messages (``records.build_messages``) and
published through the project's ``KafkaPublisher`` (send, then confirm: produce every message, flush, check the
reports) to a fresh topic of the dev stack's broker, with the project's producer settings, against the same settings
with a delivery report for every message (``delivery.report.only.error`` off). The two producers alternate, page set
by page set, in one process; the figure is the process's CPU (``time.process_time``: Python and librdkafka's threads)
per page, median of the rounds. Needs the running stack (``dev/stack.py up``).

``--against REF`` compares a change to the publisher instead: ``KafkaPublisher`` as committed at REF (its module read
with ``git show``) against the working tree's, both with the project's settings, alternated the same way.

Example::

    .venv/bin/python bench/produce_path.py --rounds 6 --pages 20
    .venv/bin/python bench/produce_path.py --against HEAD~1
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "dev")]

from crawlbench.demo_pages import demo_pages  # noqa: E402
from crawlbench.environment import load_stack  # noqa: E402

PAGE = 1000
PRODUCER_MODULE = "plugins/crawler_ops/hooks/kafka/producer.py"


def publisher_at(ref: str) -> Any:
    """``KafkaPublisher`` of the producer module as committed at ``ref`` (importing today's rest of the package)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{ref}:{PRODUCER_MODULE}"], check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType(f"producer_at_{ref}")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the class is built
    exec(compile(source, f"{ref}:{PRODUCER_MODULE}", "exec"), module.__dict__)  # the repo's own code, at REF
    return module.KafkaPublisher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pages", type=int, default=20, help="pages of 1,000 records a round")
    parser.add_argument("--against", metavar="REF", help="the publisher at this git ref against the working tree's")
    args = parser.parse_args(argv)
    stack = load_stack()
    from confluent_kafka.admin import AdminClient, NewTopic

    from crawler_ops.hooks.kafka.producer import KafkaPublisher, ReportingProducer
    from crawler_ops.message.records import build_messages
    from crawler_ops.planning import Batch
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
    if args.against:
        baseline = f"KafkaPublisher at {args.against}"
        classes = {baseline: publisher_at(args.against), "KafkaPublisher (working tree)": KafkaPublisher}
        publishers = {label: cls(ReportingProducer(settings), topic, "bench") for label, cls in classes.items()}
    else:
        baseline = "every delivery reported"
        variants = {
            baseline: {**settings, "delivery.report.only.error": False},
            "failures only (the project's)": settings,
        }
        publishers = {
            label: KafkaPublisher(ReportingProducer(config), topic, "bench") for label, config in variants.items()
        }
    cpu: dict[str, list[float]] = {label: [] for label in publishers}
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
    base = statistics.median(cpu[baseline])
    for label, figures in cpu.items():
        median = statistics.median(figures)
        print(f"  {label:32s} median {median:5.2f}  ×{median / base:.2f}  rounds {[round(f, 2) for f in figures]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
