"""The limits the crawl runs against: how fast one client drains the source, how fast the in-window records
can be produced to Kafka, and what each piece of a page's handling costs."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import msgspec

from crawlbench.common import REF, TOLERANCE_S, WINDOW_DAYS, BenchError, Headers, expected_first_crawl_pages
from crawlbench.environment import Stack
from crawlbench.results import Variant
from crawlbench.source import Dataset, get_page
from crawlbench.topics import CountingProducer, check_topic, warm_producer


def crawl_pages(ds: Dataset) -> list[tuple[int, int]]:
    """``(offset, limit)`` of the pages a first crawl reads, newest first: the in-window pages and the
    early-stop allowance below them (the last one clipped at offset 0)."""
    pages = []
    for index in range(min(expected_first_crawl_pages(ds.in_window, ds.batch), math.ceil(ds.total / ds.batch))):
        hi = ds.total - index * ds.batch
        pages.append((max(0, hi - ds.batch), hi - max(0, hi - ds.batch)))
    return pages


def measure_in_flight(url: str, ds: Dataset, in_flight: int) -> Variant:
    """The source's limit for a crawl that keeps ``in_flight`` pages in flight: the first crawl's pages, each
    fetched and decoded as by the drain, ``in_flight`` at a time on one keep-alive client. With a latency per
    request this measures ``min(in_flight x page / latency, what the source serves)``."""
    pages = crawl_pages(ds)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    with httpx.Client(base_url=url, timeout=120.0, limits=limits) as client, ThreadPoolExecutor(in_flight) as pool:
        started = time.perf_counter()
        read = list(pool.map(lambda page: get_page(client, ds.name, *page), pages))
        seconds = time.perf_counter() - started
    records = sum(len(page) for page, _ in read)
    return Variant(
        name=f"source, {in_flight} pages in flight (the first crawl's pages)",
        wall_s=seconds,
        pages=len(pages),
        fetched=records,
        kept=0,
        published=0,
        rate=records / seconds,
        details={"in_flight": in_flight, "mb_per_s": sum(size for _, size in read) / seconds / 1e6},
    )


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
    """Milliseconds per page of ``batch`` in-window records, each piece as the project runs it: the GET, the
    project's page decode (``SourceApiHook.read_page``: the records as raw JSON, then their date and key
    fields), filter+encode (``records.build_messages`` on that page, the window in the filter's zone as the
    chunk has it), produce+flush; filter+encode and produce+flush again with each registry value format (the
    values framed and checked against a schema inferred from the first page, as a new subject's would be); and for
    reference a full msgspec decode and filter+encode of the fully decoded records (how this was measured before the
    page decode read the fields).
    """
    from crawler_ops.config import SourceConfig
    from crawler_ops.hooks.source.hook import SourceApiHook
    from crawler_ops.message import filtering, records  # plugins/ is on the path (crawlbench.environment)
    from crawler_ops.message.schemas import avro_schema, json_schema
    from crawler_ops.message.values import ValueCodec

    rule = filtering.DateRule()
    window = filtering.Window.since(REF, WINDOW_DAYS, REF, timedelta(seconds=TOLERANCE_S)).in_zone(rule.tz)
    source = SourceApiHook(SourceConfig(), "bench", ds.name, records.head_fields(rule.fields, "id"))
    headers = [("crawl_task", b"bench"), ("run_id", b"components")]
    topic = f"{ds.name}.components"
    producer = warm_producer(stack, scratch, topic)
    sample = msgspec.json.decode(pages[0].body)["data"]["data"]
    codecs = {
        "json_schema": ValueCodec("json_schema", 1, json_schema(sample, closed=True, loose=True)),
        "avro": ValueCodec("avro", 2, avro_schema(sample, "bench", loose=True)),
    }
    steps = ("decode", "dict_build", "project_decode", "build", "publish")
    times: dict[str, list[float]] = {
        k: [] for k in (*steps, *(f"{n}_{k}" for n in codecs for k in ("build", "publish")))
    }
    value_bytes: dict[str, list[int]] = {name: [] for name in ("json", *codecs)}

    def timed(name: str, step: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = step()
        times[name].append(time.perf_counter() - started)
        return value

    for page in pages[:limit]:
        decoded = timed("decode", lambda page=page: msgspec.json.decode(page.body)["data"]["data"])
        timed("dict_build", lambda d=decoded, o=page.offset: records.build_messages(d, o, rule, window, "id", headers))
        project_page = timed("project_decode", lambda page=page: source.read_page(page.body))
        result = timed(
            "build", lambda p=project_page, o=page.offset: records.build_messages(p, o, rule, window, "id", headers)
        )
        timed("publish", lambda r=result: publish(producer, topic, r.messages))
        value_bytes["json"].append(sum(len(m.value) for m in result.messages))
        for name, codec in codecs.items():
            framed = timed(
                f"{name}_build",
                lambda p=project_page, o=page.offset, c=codec: records.build_messages(
                    p, o, rule, window, "id", headers, value=c
                ),
            )
            assert not framed.dead_letters, f"{name}: {framed.dead_letters[:1]}"
            timed(f"{name}_publish", lambda r=framed: publish(producer, topic, r.messages))
            value_bytes[name].append(sum(len(m.value) for m in framed.messages))
    ms = {name: statistics.median(values) * 1000.0 for name, values in times.items()}
    formats = {
        f"{name}_{what}": value
        for name in codecs
        for what, value in (
            ("filter_encode_us_per_record", ms[f"{name}_build"] * 1000.0 / ds.batch),
            ("produce_flush_ms", ms[f"{name}_publish"]),
        )
    }
    sizes = {f"{name}_value_bytes": statistics.mean(sizes) / ds.batch for name, sizes in value_bytes.items()}
    return {
        "pages_sampled": float(len(times["build"])),
        "records_per_page": float(ds.batch),
        "get_ms": statistics.median(p.fetch_s for p in pages[:limit]) * 1000.0,
        "decode_ms": ms["decode"],
        "dict_filter_encode_ms": ms["dict_build"],
        "project_decode_ms": ms["project_decode"],
        "filter_encode_ms": ms["build"],
        "filter_encode_us_per_record": ms["build"] * 1000.0 / ds.batch,
        "produce_flush_ms": ms["publish"],
        **formats,
        **sizes,
    }


def publish(producer: CountingProducer, topic: str, messages: Sequence[Any]) -> None:
    """Produce a page's messages and wait for every delivery report."""
    for message in messages:
        producer.produce(topic, message.key, message.value, list(message.headers))
    producer.flush("components")
