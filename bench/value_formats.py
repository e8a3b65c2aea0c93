"""What each ``kafka.value_format`` costs where records are built: the page filter
(``crawler_ops.message.records.build_messages``) over 40 demo-source pages of 500 records, every record kept and keyed
by ``id``, publishing the record as sent (``json``), framed and checked against an inferred JSON Schema
(``json_schema``), and encoded in Avro (``avro``). CPU seconds (``time.process_time``), the formats interleaved, the
best of ``--rounds``; the figures are microseconds a record and ratios to ``json`` measured in the same run. Needs no
stack: the schemas are inferred from the pages as a new subject's would be, and given a made-up registry id.

Example::

    .venv/bin/python bench/value_formats.py --rounds 7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "dev")]

from crawlbench.demo_pages import demo_pages  # noqa: E402
from crawler_ops.message.records import build_messages  # noqa: E402
from crawler_ops.message.schemas import avro_schema, json_schema  # noqa: E402
from crawler_ops.message.values import ValueCodec  # noqa: E402

PAGES, PAGE = 40, 500


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    demo = demo_pages(PAGES, PAGE)
    sample = [msgspec.json.decode(record) for record in demo.pages[0]]
    codecs: dict[str, ValueCodec | None] = {
        "json": None,
        "json_schema": ValueCodec("json_schema", 1, json_schema(sample, title="bench", closed=True)),
        "avro": ValueCodec("avro", 2, avro_schema(sample, name="bench")),
    }
    best = dict.fromkeys(codecs, float("inf"))
    for _ in range(args.rounds):
        for label, codec in codecs.items():
            started = time.process_time()
            kept = sum(
                build_messages(page, i * PAGE, demo.rule, demo.window, "id", demo.headers, value=codec).kept
                for i, page in enumerate(demo.pages)
            )
            best[label] = min(best[label], time.process_time() - started)
            assert kept == demo.records, f"{label}: {kept} of {demo.records} kept"
    per_record = {label: seconds / demo.records * 1e6 for label, seconds in best.items()}
    print(f"value formats: {demo.records} records of {demo.record_bytes:.0f} bytes, best of {args.rounds} rounds")
    print("| value_format | us a record | ratio to json |")
    print("|---|---|---|")
    for label, us in per_record.items():
        print(f"| {label} | {us:.2f} | {us / per_record['json']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
