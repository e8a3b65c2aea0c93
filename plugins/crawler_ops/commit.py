"""Step 3 of a crawl run, the DAG's ``commit`` task: move the watermark, tidy the status table, store and
return the run summary; also the summaries of runs that failed before or without their commit."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.errors import CrawlerError
from crawler_ops.hooks.store import CrawlStoreHook
from crawler_ops.planning import Batch, advance_watermark
from crawler_ops.run import RunContext, RunParams
from crawler_ops.sqlfiles import read_sql

log = logging.getLogger(__name__)


def commit_run(run: RunContext, chunks: Sequence[Mapping[str, Any]], results: Sequence[Any]) -> dict[str, Any]:
    """Move the watermark up to the oldest batch not done, tidy the status table, store the run summary.

    Runs after every chunk finished or failed. Returns the summary; the caller fails the DAG run when
    batches of this plan are left undone.
    """
    params = run.params
    planned = [Batch(lo, hi) for chunk in chunks for lo, hi in chunk["batches"]]
    if params.dry_run:
        summary = sum_results(results)
        summary.update(mode="dry_run", planned=len(planned), unfinished=len(chunks) - len(results))
        return summary
    store = run.store()
    with store.transaction(lock=True) as cur:
        record = store.read_run(cur, run.run_id) or {}
        old = store.read_watermark(cur)
        new = old
        unfinished: list[Batch] = []
        if run.uses_status_table:
            done = store.done_batches(cur, above=0)
            new = advance_watermark(old or 0, done)
            # Rows below the watermark were pruned by an earlier commit: the watermark says they are done.
            done_set = set(done)
            unfinished = [b for b in planned if b.hi > new and b not in done_set]
            total = record.get("total") or 0
            # The totals get what this run kept and published since its last commit: a retried commit adds
            # nothing, a commit after clearing failed chunks adds what they crawled.
            kept = record.get("kept", 0) - record.get("committed_kept", 0)
            published = record.get("published", 0) - record.get("committed_published", 0)
            store.run_statement(
                cur,
                "save_progress",
                watermark=new,
                total=total,
                last_start=max((b.lo for b in planned), default=None),
                status="completed" if not unfinished else "incomplete",
                kept=kept,
                published=published,
                run_id=run.run_id,
            )
            store.run_statement(cur, "prune_batches", watermark=new)
            store.release_run(cur, run.run_id)
        elif len(results) < len(chunks):
            unfinished = planned
        status = "success" if not unfinished else "failed"
        errors = list(record.get("errors") or [])
        store.run_statement(cur, "finish_run", run_id=run.run_id, watermark=new, status=status, errors=Jsonb(errors))
    return run_summary(run, record, status, len(planned), old, new, errors, unfinished)


def run_summary(
    run: RunContext,
    record: Mapping[str, Any],
    status: str,
    planned: int,
    old: int | None,
    new: int | None,
    errors: Sequence[str],
    unfinished: Sequence[Batch] = (),
) -> dict[str, Any]:
    """The run summary: returned by commit, logged, sent to the webhook, attached to the topic's Asset event."""
    started = record.get("started_at")
    return {
        "task": run.cfg.id,
        "run_id": run.run_id,
        "mode": record.get("mode"),
        "status": status,
        "topic": run.cfg.kafka.topic,
        "ref_time": run.ref.isoformat(),
        "total": record.get("total"),
        "planned": planned,
        "pages": record.get("pages", 0),
        "fetched": record.get("fetched", 0),
        "kept": record.get("kept", 0),
        "published": record.get("published", 0),
        "expired": record.get("expired", 0),
        "dead_lettered": record.get("dead_lettered", 0),
        "errors": list(errors),
        "old_watermark": old,
        "new_watermark": new,
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3) if started else None,
        "unfinished_batches": len(unfinished),
        "oldest_unfinished": [[b.lo, b.hi] for b in sorted(unfinished)[:5]],
    }


def close_abandoned_run(cfg: CrawlTaskConfig, run_id: str, reason: str) -> dict[str, Any] | None:
    """A DAG run failed without its commit finishing the record: mark the record failed, give its claims back.

    :return: the run summary when this closed the record; None when the commit had already finished it (or
        there is no record), so the caller notifies only runs nobody reported.
    """
    store = CrawlStoreHook(cfg.postgres_conn_id, cfg.id)
    try:
        with store.transaction(lock=True) as cur:
            if (
                cur.execute(read_sql("cancel_run"), {"task": cfg.id, "run_id": run_id, "error": reason}).fetchone()
                is None
            ):
                return None
            released = store.release_run(cur, run_id)
            record = store.read_run(cur, run_id) or {}
            old = store.read_watermark(cur)
    finally:
        store.close()
    log.warning("task %s run %s ended without a commit (%s); %d claims released", cfg.id, run_id, reason, released)
    run = RunContext(cfg=cfg, run_id=run_id, ref=record.get("ref_time") or datetime.now(UTC), params=RunParams())
    return run_summary(run, record, "failed", record.get("planned", 0), old, old, record.get("errors") or [])


def failed_plan_summary(run: RunContext) -> dict[str, Any]:
    """The summary of a run whose plan failed, from its run record when the plan could write one."""
    record: Mapping[str, Any] = {}
    if not run.params.dry_run:
        store = run.store()
        try:
            with store.transaction() as cur:
                record = store.read_run(cur, run.run_id) or {}
        except (CrawlerError, psycopg.Error):
            log.exception("task %s: could not read the run record of the failed plan", run.cfg.id)
        finally:
            store.close()
    errors = list(record.get("errors") or []) or ["the plan task failed before it could record the run; see its log"]
    old = record.get("old_watermark")
    return run_summary(run, record, "failed", record.get("planned", 0), old, old, errors)


def sum_results(results: Sequence[Any]) -> dict[str, Any]:
    keys = ("pages", "fetched", "kept", "published", "expired", "dead_lettered", "batches_done")
    return {key: sum(int(r.get(key, 0)) for r in results if isinstance(r, Mapping)) for key in keys}
