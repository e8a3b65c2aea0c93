"""``crawler-ops check``: one total, the newest page and the oldest record of a task's source, through the task's own
auth, rate limit and deadline, judged by :mod:`crawler_ops.source_check`.

At most three requests when the source has a count endpoint (without one the total is probed: about ``2 log2(total /
batch_size)`` more): the count, the newest page (offsets ``[total - batch_size, total)``, or the newest page of a page
paginator), and the record at offset 0 (to judge the order against the newest page; skipped when the page holds it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.batch_filter import BatchFilter
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.errors import CrawlerError, SourceError
from crawler_ops.hooks.auth import redact
from crawler_ops.hooks.deadline import deadline
from crawler_ops.hooks.source import SourceApiHook
from crawler_ops.planning import Batch
from crawler_ops.records import Message, full_record, record_head
from crawler_ops.source_check import (
    Dated,
    Rate,
    date_report,
    first_crawl_estimate,
    key_report,
    order_verdict,
    problems,
    record_lists,
    record_moment,
    records_at,
    window_records,
)

#: The run id in the headers of a check's sample message (a crawl's own run id there).
CHECK_RUN_ID = "check"


class CheckFailed(CrawlerError):
    """The source or the task's config could not be read: the check has no answer."""


def check_task(cfg: CrawlTaskConfig, now: datetime | None = None) -> dict[str, Any]:
    """The check report of ``cfg``'s source (see :func:`crawler_ops.source_check.problems` for its verdict).

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
        report.update(fetch_and_judge(run, source, requests))
    except (SourceError, CrawlerError) as exc:
        raise CheckFailed(redact(str(exc))) from exc
    finally:
        source.close()
    report["requests"] = requests()
    report["problems"] = problems(report)
    report["exit_code"] = 1 if report["problems"] else 0
    return report


def check_within(cfg: CrawlTaskConfig, seconds: float) -> dict[str, Any]:
    """The check as the status view runs it: every request within ``seconds``; a check that could not run is a
    report with its ``error`` (exit code 2)."""
    try:
        with deadline(seconds):
            return check_task(cfg)
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


def fetch_and_judge(run: RunContext, source: SourceApiHook, requests: Callable[[], int]) -> dict[str, Any]:
    cfg = run.cfg
    total = source.get_total()
    how = "count endpoint" if cfg.source.count_path is not None else "probed: no count endpoint"
    found: dict[str, Any] = {"total": {"value": total, "how": how, "requests": requests()}}
    lo, hi = newest_batch(total, cfg.batch_size, cfg.source.paginator.pages)
    call = source.paging.calls(lo, hi)[0] if hi > lo else None
    if call is None:
        return found | {
            "page": {
                "where": "none (the source is empty)",
                "records_path": cfg.source.records_path,
                "records": 0,
                "suggested_paths": [],
            }
        }
    started = time.monotonic()
    document, body = source.get_json(call.send, call.where, decode=lambda raw: (msgspec.json.decode(raw), raw))
    latency = time.monotonic() - started
    listed = records_at(document, cfg.source.records_path)
    page_report = {
        "where": call.where,
        "offsets": [lo, hi],
        "request": f"{call.send.method} {call.send.path}",
        "records_path": cfg.source.records_path,
        "records": None if listed is None else len(listed),
        "suggested_paths": [] if listed else record_lists(document),
    }
    found["page"] = page_report
    if not listed:
        return found
    page = source.paging.reader(call, (), f"task {cfg.id}")(body)
    records = [full_record(record) for record in page]
    objects = [r for r in records if isinstance(r, dict)]
    rule = cfg.filter.rule
    window = run.window.in_zone(rule.tz)
    dated = [Dated(lo + i, m) for i, r in enumerate(objects) if (m := record_moment(r, rule.fields, rule.tz))]
    if lo > 0:
        oldest = source.get_page(0, 1)
        head = record_head(oldest[0], rule.fields) if oldest else {}
        moment = record_moment(head, rule.fields, rule.tz)
        dated = [Dated(0, moment), *dated] if moment is not None else dated
    found["keys"] = key_report(objects, cfg.kafka.key_field)
    found["dates"] = date_report(objects, rule.fields, rule.tz, window)
    found["order"] = order_verdict(dated)
    found["sample_message"] = sample_message(run, Batch(lo, lo + len(page)), page)
    rate = Rate(
        batch_size=cfg.batch_size,
        aligned=cfg.source.paginator.pages,
        concurrency=cfg.source.concurrency,
        max_in_flight=cfg.source.max_in_flight,
        requests_per_s=cfg.source.requests_per_s,
        max_expired_batches=cfg.max_expired_batches,
        latency_s=latency,
        total_requests=found["total"]["requests"],
    )
    in_window = window_records(total, dated, window.start) if found["order"]["verdict"] != "no" else None
    found["first_crawl"] = first_crawl_estimate(total, in_window, rate)
    return found


def newest_batch(total: int, batch_size: int, aligned: bool) -> tuple[int, int]:
    """The offsets of a crawl's newest batch: ``[total - batch_size, total)``, or the newest page's when batches
    are cut at page boundaries."""
    if total <= 0:
        return 0, 0
    lo = (total - 1) // batch_size * batch_size if aligned else max(0, total - batch_size)
    return lo, total


def sample_message(run: RunContext, batch: Batch, page: Any) -> dict[str, Any] | None:
    """The message a crawl publishes for the newest record of ``page`` that it keeps (its filter, transform, key and
    headers; a crawl's headers carry its run id instead of ``check``), or None when it keeps none."""
    filtered = BatchFilter(run, early_stop=False).filter(batch, page)
    kept = [m for m in filtered.messages if m.topic is None]
    return None if not kept else show_message(kept[-1], run.cfg.kafka.topic)


def show_message(message: Message, topic: str) -> dict[str, Any]:
    return {
        "topic": message.topic or topic,
        "key": message.key.decode("utf-8", "replace"),
        "headers": [[name, value.decode("utf-8", "replace")] for name, value in message.headers],
        "value": bytes(message.value).decode("utf-8", "replace"),
    }
