"""The limits the crawl runs against: how fast one client drains the source, how fast the in-window records
can be produced to Kafka, and what each piece of a page's handling costs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import httpx
import msgspec

from crawlbench.common import REF, TOLERANCE_S, WINDOW_DAYS, BenchError, Headers
from crawlbench.environment import Stack
from crawlbench.results import Variant
from crawlbench.source import Dataset, get_page
from crawlbench.topics import check_topic, warm_producer


def measure_drain(url: str, ds: Dataset, passes: int) -> Variant:
    """Fetch and decode every page sequentially with one keep-alive client; the best of ``passes`` counts."""
    with httpx.Client(base_url=url, timeout=60.0) as client:
        runs = [drain_pass(client, ds) for _ in range(max(1, passes))]
    best = min(runs, key=lambda r: r["seconds"])
    return Variant(
        name="source drain",
        wall_s=best["seconds"],
        pages=int(best["pages"]),
        fetched=ds.total,
        kept=0,
        published=0,
        rate=best["records_per_s"],
        details={
            "passes": [{k: r[k] for k in ("seconds", "records_per_s", "mb_per_s")} for r in runs],
            "mb_per_s": best["mb_per_s"],
            "bytes_per_record": best["bytes"] / ds.total,
        },
    )


def drain_pass(client: httpx.Client, ds: Dataset) -> dict[str, float]:
    """One pass over every page of the data set, in offset order."""
    records = pages = body_bytes = 0
    started = time.perf_counter()
    for offset in range(0, ds.total, ds.batch):
        page, size = get_page(client, ds.name, offset, ds.batch)
        records += len(page)
        body_bytes += size
        pages += 1
    seconds = time.perf_counter() - started
    if records != ds.total:
        raise BenchError(f"drain read {records} records, expected {ds.total}")
    return {
        "seconds": seconds,
        "records_per_s": records / seconds,
        "mb_per_s": body_bytes / seconds / 1e6,
        "pages": pages,
        "bytes": body_bytes,
    }


@dataclass(frozen=True)
class RawPage:
    """One page as fetched: where it starts, its body, and how long the GET took."""

    offset: int
    body: bytes
    fetch_s: float


def fetch_window_pages(url: str, ds: Dataset) -> list[RawPage]:
    """The pages covering the in-window records (the newest ``in_window`` offsets), untimed for the table."""
    pages: list[RawPage] = []
    low = ds.total - ds.in_window
    with httpx.Client(base_url=url, timeout=60.0) as client:
        for offset in range(low, ds.total, ds.batch):
            started = time.perf_counter()
            response = client.get(f"/api/{ds.name}/list", params={"offset": offset, "limit": ds.batch})
            response.raise_for_status()
            pages.append(RawPage(offset, response.content, time.perf_counter() - started))
    return pages


def window_messages(ds: Dataset, pages: Sequence[RawPage]) -> list[tuple[bytes, bytes, Headers]]:
    """Key, value and headers (like the project's) of every in-window record of ``pages``."""
    encoder = msgspec.json.Encoder()
    messages: list[tuple[bytes, bytes, Headers]] = []
    for page in pages:
        for index, record in enumerate(msgspec.json.decode(page.body)["data"]["data"]):
            if record["id"] in ds.in_window_ids:
                headers: Headers = [
                    ("crawl_task", b"bench"),
                    ("run_id", b"sink"),
                    ("source_offset", b"%d" % (page.offset + index)),
                ]
                messages.append((record["id"].encode(), encoder.encode(record), headers))
    return messages


def measure_sink(stack: Stack, ds: Dataset, pages: Sequence[RawPage], scratch: str) -> Variant:
    """Produce the in-window records as fast as possible, one flush at the end."""
    messages = window_messages(ds, pages)
    topic = f"{ds.name}.sink"
    producer = warm_producer(stack, scratch, topic)
    started = time.perf_counter()
    for key, value, headers in messages:
        producer.produce(topic, key, value, headers)
    producer.flush("sink limit")
    seconds = time.perf_counter() - started
    return Variant(
        name="sink limit (1 flush)",
        wall_s=seconds,
        pages=None,
        fetched=0,
        kept=len(messages),
        published=producer.delivered,
        rate=producer.delivered / seconds,
        rate_basis="produced",
        keys=check_topic(stack.bootstrap, topic, ds.in_window_ids),
        details={"topic": topic, "value_bytes": sum(len(m[1]) for m in messages)},
    )


def measure_components(
    stack: Stack, ds: Dataset, pages: Sequence[RawPage], scratch: str, limit: int = 20
) -> dict[str, float]:
    """Milliseconds per page of ``batch`` records: GET, decode, the project's filter+encode, produce+flush.

    Uses the package's pure ``crawler_ops.records.build_messages`` on in-window pages.
    """
    from crawler_ops import filtering, records  # plugins/ is on the path (crawlbench.environment)

    rule = filtering.DateRule()
    window = filtering.Window.around(REF, WINDOW_DAYS, timedelta(seconds=TOLERANCE_S))
    sample = list(pages[:limit])
    topic = f"{ds.name}.components"
    producer = warm_producer(stack, scratch, topic)
    decode, build, publish = [], [], []
    for page in sample:
        started = time.perf_counter()
        raw = msgspec.json.decode(page.body)["data"]["data"]
        decode.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = records.build_messages(raw, page.offset, rule, window, "id", [("crawl_task", b"bench")])
        build.append(time.perf_counter() - started)
        started = time.perf_counter()
        for message in result.messages:
            producer.produce(topic, message.key, message.value, list(message.headers))
        producer.flush("components")
        publish.append(time.perf_counter() - started)
    ms = 1000.0
    return {
        "pages_sampled": float(len(sample)),
        "records_per_page": float(ds.batch),
        "get_ms": statistics.median(p.fetch_s for p in sample) * ms,
        "decode_ms": statistics.median(decode) * ms,
        "filter_encode_ms": statistics.median(build) * ms,
        "produce_flush_ms": statistics.median(publish) * ms,
    }
