"""This project's crawl DAG run by ``airflow dags test`` on a one-task config: measured, checked against the
source's truth, and broken down by phase."""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import yaml

from crawlbench.common import MAX_EXPIRED_BATCHES, PARTITIONS, REF, TOLERANCE_S, WINDOW_DAYS, BenchError
from crawlbench.environment import Stack, airflow_command, airflow_env, metadata_db
from crawlbench.metadata import add_chunk_figures, chunk_results
from crawlbench.profile import chunk_profile, profiled
from crawlbench.results import Variant
from crawlbench.sampling import ProcessStats, run_monitored
from crawlbench.source import Dataset, SourceAdmin
from crawlbench.timeline import parse_timeline
from crawlbench.topics import check_topic


def project_config(ds: Dataset, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    """A one-task crawler_ops config for the data set (schedule null, retries 0, fresh topic)."""
    # The raw loop: no rate limit, no bound on requests in flight (source pools), as before they existed.
    source: dict[str, Any] = {"conn_id": "demo_source", "task": ds.name, "requests_per_s": None, "max_in_flight": None}
    if args.concurrency:
        source["concurrency"] = args.concurrency
    task: dict[str, Any] = {
        "id": ds.name,
        "name": f"crawl benchmark {ds.total}",
        "source": source,
        "batch_size": ds.batch,
        "filter": {"days": WINDOW_DAYS, "future_tolerance_hours": TOLERANCE_S / 3600},
        "max_expired_batches": MAX_EXPIRED_BATCHES,
        "kafka": {"topic": topic, "partitions": PARTITIONS},
        "schedule": None,
        "retries": 0,
    }
    if args.min_batches_per_chunk:
        task["min_batches_per_chunk"] = args.min_batches_per_chunk
    if args.max_chunks:
        task["max_chunks"] = args.max_chunks
    return {"tasks": [task]}


def in_flight(args: argparse.Namespace) -> int:
    """Pages one chunk keeps in flight: ``--concurrency``, else the project's default ``source.concurrency``."""
    from crawler_ops.config import SourceConfig  # plugins/ is on the path (crawlbench.environment)

    return int(args.concurrency or SourceConfig().concurrency)


def write_config(ds: Dataset, topic: str, args: argparse.Namespace, out_dir: Path) -> Path:
    """The data set's one-task config as ``out_dir/<name>.yaml``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{ds.name}.yaml"
    path.write_text(yaml.safe_dump(project_config(ds, topic, args), sort_keys=False))
    return path


def read_run_record(pg_uri: str, task_id: str) -> dict[str, Any]:
    """The newest ``crawler_ops.crawl_run`` row of a task."""
    with psycopg.connect(pg_uri) as conn:
        cur = conn.execute(
            "SELECT * FROM crawler_ops.crawl_run WHERE task_id = %s ORDER BY started_at DESC LIMIT 1", (task_id,)
        )
        row = cur.fetchone()
        if row is None:
            raise BenchError(f"no crawler_ops.crawl_run row for task {task_id}: the plan task did not record a run")
        return dict(zip([d.name for d in cur.description or ()], row, strict=True))


def crawl_seconds(record: dict[str, Any]) -> float:
    """The run record's span, plan's transaction to commit's (NaN while unfinished)."""
    return (record["finished_at"] - record["started_at"]).total_seconds() if record["finished_at"] else math.nan


def dags_test(
    stack: Stack, ds: Dataset, args: argparse.Namespace, config_path: Path, log_path: Path, profile: bool = False
) -> tuple[list[str], ProcessStats, dict[int, dict[str, Any]]]:
    """Run ``airflow dags test`` as a monitored subprocess; its command, stats and the chunks' return values
    (read before a private metadata DB goes away)."""
    command = [*airflow_command(), "dags", "test", f"crawl_{ds.name}", REF.isoformat()]
    if profile:
        command = profiled(command, log_path.with_suffix(".py-spy.txt"))
    with airflow_env(stack, args.shared_airflow_db) as env:
        env["CRAWLER_OPS_CONFIG"] = str(config_path)
        stats = run_monitored(command, env, log_path)
        if stats.returncode != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
            raise BenchError(f"`{' '.join(command)}` exited with {stats.returncode}; log {log_path}:\n{tail}")
        chunks = chunk_results(metadata_db(env), f"crawl_{ds.name}")
    return command, stats, chunks


def run_project(
    stack: Stack, admin: SourceAdmin, ds: Dataset, args: argparse.Namespace, out_dir: Path, profile: bool = False
) -> Variant:
    """``airflow dags test crawl_<id> <REF>`` on a one-task config; measured, checked and broken down."""
    topic = f"{ds.name}.project"
    config_path = write_config(ds, topic, args, out_dir)
    log_path = out_dir / f"{ds.name}.dags-test.log"
    admin.clear_requests(ds.name)
    command, stats, chunks = dags_test(stack, ds, args, config_path, log_path, profile)
    record = read_run_record(stack.pg_uri, ds.name)
    crawl_s = crawl_seconds(record)
    timeline = parse_timeline(log_path.read_text(errors="replace"), stats.started_epoch, stats.ended_epoch)
    add_chunk_figures(timeline["spans"], chunks)
    for span in timeline["spans"]:
        span["peak_rss_mb"] = stats.peak_rss_mb(span["start_epoch"], span["end_epoch"])
    process = {k: v for k, v in asdict(stats).items() if k != "rss_samples"}
    return Variant(
        name="project: dags test (wall)",
        wall_s=stats.wall_s,
        pages=int(record["pages"]),
        fetched=int(record["fetched"]),
        kept=int(record["kept"]),
        published=int(record["published"]),
        rate=int(record["fetched"]) / stats.wall_s,
        requests=admin.requests(ds.name),
        keys=check_topic(stack.bootstrap, topic, ds.in_window_ids),
        cpu_s=stats.cpu_s,
        details={
            "topic": topic,
            "command": " ".join(command),
            "config": str(config_path),
            "log": str(log_path),
            "crawl_s": crawl_s,
            "airflow_overhead_s": stats.wall_s - crawl_s,
            "process": process,
            "in_flight": in_flight(args),
            "ref_time_ok": record["ref_time"] == REF,
            "run_record": {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in record.items()},
            "timeline": timeline,
            "profile": chunk_profile(log_path.with_suffix(".py-spy.txt")) if profile else None,
        },
    )
