"""Command line: ``python -m crawler_ops status [--task ID] [--json] [--no-live]`` and
``python -m crawler_ops skip-batch --task ID --offset O``.

Run it where the DAGs run (same ``AIRFLOW_CONN_*`` connections, same ``CRAWLER_OPS_CONFIG``) with
``plugins/`` on ``PYTHONPATH``; ``make status`` does that for the local stack.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from crawler_ops.config import load_config
from crawler_ops.errors import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler_ops", description="crawler_ops operations")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="per crawl task: source total, watermark, runs, errors, Kafka lag")
    status.add_argument("--task", help="only this crawl task id")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.add_argument("--no-live", action="store_true", help="do not ask the sources and Kafka (PostgreSQL only)")
    skip = commands.add_parser("skip-batch", help="let the watermark pass a parked batch (its records are lost)")
    skip.add_argument("--task", required=True, help="the crawl task id")
    skip.add_argument("--offset", type=int, required=True, help="the parked batch's start offset")
    args = parser.parse_args(argv)
    if args.command == "skip-batch":
        return skip_batch(args.task, args.offset)

    from crawler_ops.status import collect  # imports Airflow: after argument errors are reported

    try:
        report = collect(load_config(), args.task, live=not args.no_live)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyError:
        print(f"error: no crawl task '{args.task}' in the config; see the 'tasks' list", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2, default=str))
    else:
        print(render_text(report))
    return 0


def skip_batch(task_id: str, offset: int) -> int:
    """Mark the parked batch of ``task_id`` starting at ``offset`` done without its records, recorded as an error;
    the next run's commit moves the watermark past it."""
    from crawler_ops.config import get_task
    from crawler_ops.hooks.store import CrawlStoreHook

    try:
        cfg = get_task(task_id)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    store = CrawlStoreHook(cfg.postgres_conn_id, cfg.id)
    try:
        with store.transaction(lock=True) as cur:
            skipped = store.batches.skip_parked(cur, lo=offset)
            for parked in skipped:
                message = f"task {cfg.id}: parked batch {parked.describe()} skipped by the operator (skip-batch)"
                store.record_error(cur, "cli:skip-batch", message, "batch", parked.batch)
    finally:
        store.close()
    if not skipped:
        print(f"error: task {cfg.id} has no parked batch starting at offset {offset}; see its status", file=sys.stderr)
        return 1
    print(f"skipped {skipped[0].describe()}; the next run's commit moves the watermark past it")
    return 0


def render_text(report: Mapping[str, Any]) -> str:
    """A block of lines per task: total, watermark, progress, status, counts, running or not, lag."""
    lines = [f"crawler_ops status at {report['generated_at']}"]
    for row in report["tasks"]:
        lines += ["", f"{row['task_id']} ({row['task_name']})  dag {row['dag_id']}  topic {row['topic']}"]
        running = {True: "yes", False: "no", None: "unknown"}[row.get("running")]
        source = row.get("source_total", "-") if "source_error" not in row else f"? ({row['source_error']})"
        lines.append(
            f"  source total {show(source)}  stored total {show(row.get('total'))}  watermark "
            f"{show(row.get('watermark'))} ({row['progress']})  last start offset {show(row.get('last_start_offset'))}"
        )
        lines.append(
            f"  status {row.get('status')}  last update {show(row.get('last_update'))}  running {running}  "
            f"filtered {row.get('filtered_count', 0)}  produced {row.get('produced_count', 0)}"
        )
        for key in ("db_error", "running_error"):
            if row.get(key):
                lines.append(f"  {key.replace('_', ' ')}: {row[key]}")
        if row.get("batches"):
            lines.append("  batches " + "  ".join(f"{k} {v}" for k, v in sorted(row["batches"].items())))
        for parked in row.get("parked") or ():
            lines.append(f"  PARKED batch {parked}")
        run = row.get("last_run")
        if run:
            lines.append(
                f"  last run {run['run_id']} {run['mode']} {run['status']} {run['duration_s']}s: planned "
                f"{run['planned']} fetched {run['fetched']} kept {run['kept']} published {run['published']} "
                f"expired {run['expired']} dead-lettered {run['dead_lettered']} errors {run['errors']}"
            )
        errors = row.get("errors_24h") or {}
        if errors.get("records") or errors.get("batches"):
            counts = f"{errors['records']} records, {errors['batches']} batch/plan"
            lines.append(f"  errors (24h): {counts}; latest: {errors['latest']}")
        if "kafka" in row:
            lines.append("  kafka " + render_kafka(row["kafka"]))
    for bad in report.get("invalid_tasks", []):
        lines += ["", f"{bad['task_id']}: INVALID CONFIG: {bad['error']}"]
    return "\n".join(lines)


def show(value: Any) -> str:
    return "-" if value is None else str(value)


def render_kafka(kafka: Mapping[str, Any]) -> str:
    if "messages" not in kafka:
        return f"? ({kafka.get('error')})"
    groups = kafka.get("groups") or {}
    lags = [f"{g} lag {v['lag']}" if "lag" in v else f"{g} ? ({v['error']})" for g, v in sorted(groups.items())]
    return f"{kafka['messages']} messages" + (f"; {', '.join(lags)}" if lags else "; no consumer groups configured")


if __name__ == "__main__":
    sys.exit(main())
