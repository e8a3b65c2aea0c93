"""``crawler-ops check``: one total, the newest page and the oldest record of a task's source, through the task's own
auth, rate limit and deadline, judged by :mod:`crawler_ops.ops.source_check`.

At most three requests when the source has a count endpoint (without one the total is probed: about ``2 log2(total /
batch_size)`` more): the count, the newest page (offsets ``[total - batch_size, total)``, or the newest page of a page
paginator), and the record at offset 0 (to judge the order against the newest page; skipped when the page holds it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import msgspec

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.batch_filter import BatchFilter, load_transform
from crawler_ops.crawl.contract import decoded_records, registry_report
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import strategy_for
from crawler_ops.errors import CrawlerError, SourceError
from crawler_ops.hooks.http import deadline
from crawler_ops.hooks.source.auth import redact
from crawler_ops.hooks.source.feed import feed_send, read_feed, request_url
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.source.responses import lines_as_array
from crawler_ops.message.pages import Page, record_head
from crawler_ops.message.records import Message, full_record
from crawler_ops.message.schemas import avro_schema, json_schema
from crawler_ops.ops.source_check import (
    Dated,
    Rate,
    date_report,
    disorder,
    first_crawl_estimate,
    key_report,
    order_verdict,
    problems,
    record_lists,
    record_moment,
    records_at,
    window_records,
)
from crawler_ops.planning import Batch

#: The run id in the headers of a check's sample message (a crawl's own run id there).
CHECK_RUN_ID = "check"
FEED_ASSUMPTION = "a feed lists its newest records first, each page older than the one before"
FEED_PROBLEM = (
    "the feed's first page does not list its newest records first: the walk stops at the first record older than "
    "the window or the mark, and would skip records"
)


class CheckFailed(CrawlerError):
    """The source or the task's config could not be read: the check has no answer."""


def check_task(cfg: CrawlTaskConfig, now: datetime | None = None, transform: bool = True) -> dict[str, Any]:
    """The check report of ``cfg``'s source (see :func:`crawler_ops.ops.source_check.problems` for its verdict);
    ``transform``: whether the sample message runs the task's transform.

    :raises CheckFailed: the source did not answer, or its count cannot be read.
    """
    now = now or datetime.now(UTC)
    run = RunContext(cfg, CHECK_RUN_ID, now, RunParams())
    report: dict[str, Any] = {
        "task": cfg.id,
        "dag_id": cfg.dag_id,
        "source": cfg.source.conn_id,
        "checked_at": now.isoformat(),
    }
    source = run.source()
    requests = count_requests(source)
    try:
        report.update(fetch_and_judge(run, source, requests, transform))
    except (SourceError, CrawlerError) as exc:
        raise CheckFailed(redact(str(exc))) from exc
    finally:
        source.close()
    report["requests"] = requests() + report.get("window_count", {}).get("requests", 0)
    report["problems"] = problems(report)
    report["exit_code"] = 1 if report["problems"] else 0
    return report


def check_within(cfg: CrawlTaskConfig, seconds: float) -> dict[str, Any]:
    """The check as the status view runs it: every request within ``seconds``, the task's transform not run (no
    task code in the api-server); a check that could not run is a report with its ``error`` (exit code 2)."""
    try:
        with deadline(seconds):
            return check_task(cfg, transform=False)
    except CheckFailed as exc:
        return failed_report(cfg, str(exc))


def failed_report(cfg: CrawlTaskConfig, error: str) -> dict[str, Any]:
    """The report of a check that could not run: the source or the task's config could not be read."""
    checked_at = datetime.now(UTC).isoformat()
    return {"task": cfg.id, "source": cfg.source.conn_id, "checked_at": checked_at, "error": error, "exit_code": 2}


def count_requests(source: SourceApiHook) -> Callable[[], int]:
    """Counts the requests ``source`` sends (a retried one once) from now on."""
    sent = [0]
    send = source.get_json

    def counted(*args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return send(*args, **kwargs)

    source.get_json = counted  # type: ignore[method-assign]
    return lambda: sent[0]


def fetch_and_judge(
    run: RunContext, source: SourceApiHook, requests: Callable[[], int], transform: bool
) -> dict[str, Any]:
    """The total, then the newest page: where its records are, or the lists of objects its body holds instead."""
    cfg = run.cfg
    if not strategy_for(cfg).has_total:
        return judge_feed(run, source, transform)
    total = source.get_total()
    how = "count endpoint" if cfg.source.count_path is not None else "probed: no count endpoint"
    if cfg.source.total_header is not None:
        how = f"header {cfg.source.total_header} of the count answer"
    found: dict[str, Any] = {"total": {"value": total, "how": how, "requests": requests()}}
    lo, hi = newest_batch(total, cfg.batch_size, cfg.source.paginator.aligned)
    if hi <= lo:
        empty = {"where": "none (the source is empty)", "records_path": cfg.source.records_path, "records": 0}
        return found | {"page": empty | {"suggested_paths": []}}
    call = source.paging.calls(lo, hi)[0]
    started = time.monotonic()
    document, body = source.get_json(call.send, call.where, decode=page_document)
    latency = time.monotonic() - started
    listed = records_at(document, cfg.source.records_path)
    found["page"] = {
        "where": call.where,
        "offsets": [lo, hi],
        "request": f"{call.send.method} {call.send.path}",
        "records_path": cfg.source.records_path,
        "records": None if listed is None else len(listed),
        "suggested_paths": [] if listed else record_lists(document),
    }
    if listed:
        page = source.paging.reader(call, (), f"task {cfg.id}")(body)
        found |= judge_page(run, source, Batch(lo, lo + len(page)), page, transform)
        found["disorder"] = disorder_report(cfg, [d for d in found["dated"] if d.offset >= lo])
        if cfg.source.window_filter is not None:
            found["window_count"] = window_count(run)
        found["first_crawl"] = first_crawl(run, total, found, latency)
    return found


def page_document(body: bytes) -> tuple[Any, bytes]:
    """A page's body decoded, and the body. A body that is not one JSON document but one per line fails at once,
    saying so: the task reads JSON Lines with ``source.records_format: jsonl``."""
    try:
        return msgspec.json.decode(body), body
    except msgspec.DecodeError as malformed:
        try:
            lines_as_array(body, "")
        except SourceError:
            raise malformed from None  # not JSON Lines either: malformed JSON, as any page
        raise SourceError(
            f"the page's body is JSON Lines (one JSON value on each of its lines, {len(body)} bytes), not one JSON "
            "document: set source.records_format: jsonl",
            retriable=False,
        ) from None


def judge_feed(run: RunContext, source: SourceApiHook, transform: bool) -> dict[str, Any]:
    """A feed has no total and no offsets: its first page (the newest records) and where it says the next page is,
    judged as a page of offsets whose order is read backwards (a feed lists its newest records first)."""
    cfg = run.cfg
    base, label = str(source.client.base_url), f"task {cfg.id}"
    send = feed_send(source.paging, None, base, label)
    document, body = source.get_json(send, "feed page", decode=page_document)
    listed = records_at(document, cfg.source.records_path)
    found: dict[str, Any] = {
        "total": {"value": None, "how": f"none: a {cfg.source.paginator.type} feed is walked page after page"},
        "page": {
            "where": "the feed's first page",
            "request": f"{send.method} {send.path}",
            "records_path": cfg.source.records_path,
            "records": None if listed is None else len(listed),
            "suggested_paths": [] if listed else record_lists(document),
        },
    }
    if not listed:
        return found
    url = request_url(source.client, send)
    page = read_feed(body, cfg.source, (), base, label, url)
    found["page"]["next"] = page.next
    # Offset n - 1 - i for the i-th record listed: "dates grow with the offset" reads "the newest come first".
    n = len(page.records)
    judged = judge_page(run, source, Batch(0, n), Page(page.records[::-1]), transform, oldest=False)
    judged.pop("dated")
    evidence = judged["order"]["evidence"]
    for end, label in (("lowest", "last_listed"), ("highest", "first_listed")):  # by place on the page, from 1
        if end in evidence:
            shown = evidence.pop(end)
            evidence[label] = {"listed": n - shown.pop("offset"), **shown}
    judged["order"] |= {"assumption": FEED_ASSUMPTION, "problem": FEED_PROBLEM}
    # The message a crawl of the feed's first page publishes for its newest record (the page's first, offset 0).
    judged["sample_message"] = sample_message(run, Batch(0, 1), page.records, transform, feed=True)
    return found | judged


def judge_page(
    run: RunContext, source: SourceApiHook, batch: Batch, page: Page, transform: bool, oldest: bool = True
) -> dict[str, Any]:
    """Keys, dates and order of the records of ``batch`` (and, with ``oldest``, of the record at offset 0), and a
    sample message."""
    cfg, rule = run.cfg, run.cfg.filter.rule
    records = [full_record(record) for record in page]
    objects = [r for r in records if isinstance(r, dict)]
    dated = [
        Dated(batch.lo + i, moment)
        for i, r in enumerate(records)
        if isinstance(r, dict) and (moment := record_moment(r, rule.fields, rule.tz)) is not None
    ]
    if oldest and batch.lo > 0:
        first = source.get_page(0, 1)
        moment = record_moment(record_head(first[0], rule.fields) if first else {}, rule.fields, rule.tz)
        dated = [Dated(0, moment), *dated] if moment is not None else dated
    found = {
        "keys": key_report(objects, cfg.kafka.shape),
        "dates": date_report(objects, rule.fields, rule.tz, run.window.in_zone(rule.tz)),
        "order": order_verdict(dated),
        "sample_message": sample_message(run, batch, page, transform),
        "schema": inferred_schema(cfg, objects),
        "dated": dated,
    }
    if cfg.kafka.value_format != "json":
        found["registry"] = registry_report(cfg, decoded_records(page, load_transform(cfg) if transform else None))
    return found


def inferred_schema(cfg: CrawlTaskConfig, objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The value schema of the page's records as the source sends them (a transform is not run on them): a JSON
    Schema (draft-07) and an Avro record named after the task; None when the page holds no object."""
    if not objects:
        return None
    return {
        "records": len(objects),
        "before_transform": cfg.transform is not None,
        "json_schema": json_schema(objects, title=cfg.id, closed=True),
        "avro": avro_schema(objects, name=cfg.id),
    }


def first_crawl(run: RunContext, total: int, found: dict[str, Any], latency: float) -> dict[str, Any]:
    """The cost of a first crawl at the task's rate, from the dates seen (unknown when they do not grow)."""
    cfg = run.cfg
    rate = Rate(
        batch_size=cfg.batch_size,
        aligned=cfg.source.paginator.aligned,
        concurrency=cfg.source.concurrency,
        max_in_flight=cfg.source.max_in_flight,
        requests_per_s=cfg.source.requests_per_s,
        max_expired_batches=cfg.max_expired_batches,
        latency_s=latency,
        total_requests=found["total"]["requests"],
    )
    dated = found.pop("dated")
    count = found.get("window_count", {}).get("value")
    if count is not None:  # a first crawl counts the window (source.window_filter): so did the check, exactly
        basis = "the source's count of the window (source.window_filter)"
        return first_crawl_estimate(total, (count, count), rate, basis, counted=True)
    if found["order"]["verdict"] == "no":
        return first_crawl_estimate(total, None, rate, "the dates seen do not grow with the offset")
    in_window = window_records(total, dated, run.window.start)
    return first_crawl_estimate(total, in_window, rate, "dates seen" if in_window else "fewer than two dates seen")


def disorder_report(cfg: CrawlTaskConfig, dated: list[Dated]) -> dict[str, Any]:
    """How far apart records out of date order lie on the newest page, against what a backfill that probes for its
    interval tolerates: fewer than ``backfill_margin_batches x batch_size`` offsets (none when the source counts
    windows itself, ``source.window_filter``)."""
    margin = cfg.backfill_margin_batches * cfg.batch_size
    widest = disorder(dated)
    return {
        "offsets": widest,
        "records": len(dated),
        "backfill_margin": None if cfg.source.window_filter is not None else margin,
        "backfill_reads_all": cfg.source.window_filter is not None or widest < margin,
    }


def window_count(run: RunContext) -> dict[str, Any]:
    """The source's count of the run's window, through the filtered view a first crawl counts
    (``source.window_filter``), and the requests it took."""
    view = run.source(filtered=True)
    sent = count_requests(view)
    try:
        return {"value": view.get_total(), "requests": sent()}
    finally:
        view.close()


def newest_batch(total: int, batch_size: int, aligned: bool) -> tuple[int, int]:
    """The offsets of a crawl's newest batch: ``[total - batch_size, total)``, or the newest page's when batches
    are cut at page boundaries."""
    if total <= 0:
        return 0, 0
    lo = (total - 1) // batch_size * batch_size if aligned else max(0, total - batch_size)
    return lo, total


def sample_message(
    run: RunContext, batch: Batch, page: Page, transform: bool = True, feed: bool = False
) -> dict[str, Any] | None:
    """The message a crawl publishes for the newest record of ``page`` that it keeps (its filter, transform, key and
    headers; a crawl's headers carry its run id instead of ``check``), or None when it keeps none; ``feed``: ``page``
    is a feed's page as listed (newest first, as many records as the source sends). Without
    ``transform`` the task's transform is not run (the status view must not run the task's code in the api-server):
    the record as the source sent it, and a ``note`` saying so."""
    skipped = run.cfg.transform if not transform else None
    if skipped:
        run = replace(run, cfg=run.cfg.model_copy(update={"transform": None}))
    filtered = BatchFilter(run, early_stop=False).filter(batch, page, exact=not feed)
    kept = [m for m in filtered.messages if m.topic is None]
    if not kept:
        return None
    shown = show_message(kept[0 if feed else -1], run.cfg.kafka.topic)
    if skipped:
        shown["note"] = f"before the transform {skipped}, which the status view does not run (crawler-ops check does)"
    return shown


def show_message(message: Message, topic: str) -> dict[str, Any]:
    return {
        "topic": message.topic or topic,
        "key": message.key.decode("utf-8", "replace"),
        "headers": [[name, value.decode("utf-8", "replace")] for name, value in message.headers],
        "value": bytes(message.value).decode("utf-8", "replace"),
    }
