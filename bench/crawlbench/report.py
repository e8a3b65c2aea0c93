"""The benchmark's report: markdown tables for stdout, and the whole run as JSON."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crawlbench.common import MAX_EXPIRED_BATCHES, REF, TOLERANCE_S, WINDOW_DAYS, expected_first_crawl_pages
from crawlbench.environment import Stack
from crawlbench.results import Suite

CHUNK_RATE = "records/s (fetched / elapsed_s)"


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def dash(value: Any) -> str:
    """A value as it is, ``-`` when there is none."""
    return "-" if value is None else str(value)


def chunk_rate(row: Mapping[str, Any]) -> str:
    """A chunk's records/s; ``unknown`` when its return value has no ``elapsed_s``, ``-`` for other tasks."""
    if row.get("records_per_s") is not None:
        return fmt(row["records_per_s"])
    return "unknown" if row.get("task") == "crawl_chunk" else "-"


def main_table(suite: Suite) -> str:
    """The variants table: wall, pages, records/s, kept published, ratios to the drain and the old loop."""
    drain = suite.variant("source drain")
    old = suite.variant("old algorithm (no sleep")
    rows = [
        "| variant | wall s | pages fetched | records fetched/s | kept published | × drain rate "
        "| × old (no sleep) | topic keys = truth |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in suite.variants:
        rate = fmt(v.rate) + (" (produced/s)" if v.rate_basis == "produced" else "")
        rows.append(
            f"| {v.name} | {fmt(v.wall_s, 2)} | {fmt(v.pages) if v.pages is not None else '-'} | {rate} "
            f"| {fmt(v.published) if v.published or v.kept else '-'} "
            f"| {fmt(v.rate / drain.rate, 3) if drain else '-'} | {fmt(v.rate / old.rate, 2) if old else '-'} "
            f"| {v.keys.short() if v.keys else '-'} |"
        )
    return "\n".join(rows)


def pages_table(suite: Suite) -> str:
    """Pages fetched on the first crawl against ceil(in_window / batch) + max_expired_batches."""
    ds = suite.dataset
    expected = expected_first_crawl_pages(ds["in_window"], ds["batch"])
    rows = [
        f"First crawl: in_window={ds['in_window']}, batch={ds['batch']}: ceil(in_window/batch) + "
        f"max_expired_batches = {expected - MAX_EXPIRED_BATCHES} + {MAX_EXPIRED_BATCHES} = {expected}; "
        f"log2(total) = {math.log2(ds['total']):.1f}",
        "",
        "| variant | pages fetched | expected | pages served (source log) | 1-record probes | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for v in suite.variants:
        if v.requests is None:
            continue
        rows.append(
            f"| {v.name} | {v.pages} | {expected} | {v.requests.pages} | {v.requests.probes} | {v.requests.errors} |"
        )
    return "\n".join(rows)


def breakdown(suite: Suite) -> str:
    """Where the project's wall time goes, from the process, the run record and the dags test log."""
    p = suite.project
    proc, timeline = p["process"], p["timeline"]
    lines = [
        f"wall {proc['wall_s']:.2f} s = crawl span (PG started_at..finished_at) {p['crawl_s']:.2f} s "
        f"+ Airflow overhead {p['airflow_overhead_s']:.2f} s; CPU {proc['cpu_s']:.1f} s; "
        f"peak RSS of the process tree {proc['peak_tree_rss_mb']:.0f} MB (polled every 20 ms)",
        f"interpreter + imports until the first log line {timeline['interpreter_start_s']:.2f} s; until the first "
        f"task starts {timeline['startup_s']:.2f} s; between tasks {timeline['between_tasks_s']:.2f} s; "
        f"after the last task {timeline['teardown_s']:.2f} s",
        "",
        f"| task | map | Airflow set-up s | user code s | Airflow post-execute s | batches | fetched | {CHUNK_RATE} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for span in timeline["spans"]:
        lines.append(
            f"| {span['task']} | {span['map_index']} | {span['setup_s']:.2f} | {span['user_code_s']:.2f} "
            f"| {span['post_s']:.2f} | {dash(span.get('batches'))} | {fmt(span.get('fetched'))} "
            f"| {chunk_rate(span)} |"
        )
    return "\n".join(lines + components_lines(suite.components))


def components_lines(c: Mapping[str, float]) -> list[str]:
    """The per-page costs of the pieces, when they were measured."""
    if not c:
        return []
    return [
        "",
        f"Per page of {c['records_per_page']:.0f} in-window records (median of {c['pages_sampled']:.0f}): "
        f"GET {c['get_ms']:.1f} ms, msgspec decode {c['decode_ms']:.1f} ms, project filter+encode "
        f"(records.build_messages) {c['filter_encode_ms']:.1f} ms, produce+flush {c['produce_flush_ms']:.1f} ms",
    ]


def growth_table(suites: Sequence[Suite]) -> str:
    """How rates, pages, time and memory grow with the total."""
    rows = [
        "| total | in window | drain rec/s | old rec/s | old pages | project wall s | crawl s | overhead s "
        "| project rec/s (wall) | (crawl) | pages | expected | probes | chunks | peak RSS MB | keys ok |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    rows += [row for row in map(growth_row, suites) if row]
    return "\n".join(rows)


def growth_row(s: Suite) -> str | None:
    drain, old = s.variant("source drain"), s.variant("old algorithm (no sleep")
    proj, span = s.variant("project: dags"), s.variant("project: crawl")
    if not (drain and old and proj and span):
        return None
    chunks = sum(1 for x in s.project["timeline"]["spans"] if x["task"] == "crawl_chunk")
    expected = expected_first_crawl_pages(s.dataset["in_window"], s.dataset["batch"])
    return (
        f"| {s.dataset['total']:,} | {s.dataset['in_window']:,} | {fmt(drain.rate)} | {fmt(old.rate)} "
        f"| {old.pages} | {proj.wall_s:.2f} | {span.wall_s:.2f} | {s.project['airflow_overhead_s']:.2f} "
        f"| {fmt(proj.rate)} | {fmt(span.rate)} | {proj.pages} | {expected} "
        f"| {proj.requests.probes if proj.requests else '-'} | {chunks} "
        f"| {s.project['process']['peak_tree_rss_mb']:.0f} | {'yes' if not s.problems else '**NO**'} |"
    )


def scheduler_breakdown(details: dict[str, Any]) -> str:
    """Where a scheduler-run's time goes: trigger, queueing, each task process, the gaps between them."""
    run = details["run"]
    lines = [
        f"Real scheduler ({details['dataset']}, ref {details['ref_time']}): trigger→done {run['wall_s']:.2f} s "
        f"(`airflow dags trigger` CLI {run['trigger_cli_s']:.2f} s, run queued→started "
        f"{fmt(run['queued_to_start_s'], 2)} s, started→finished {fmt(run['run_s'], 2)} s), crawl span (PG) "
        f"{details['crawl_s']:.2f} s; logs {details['logs']}",
        "",
        "| task | map | start − upstream done s (incl. waiting for a slot) | queued→start s | duration s "
        f"| task process peak RSS MB | {CHUNK_RATE} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for ti in details["task_instances"]:
        lines.append(
            f"| {ti['task']} | {ti['map_index']} | {fmt(ti['since_upstream_done_s'], 2)} "
            f"| {fmt(ti['queued_to_start_s'], 2)} | {fmt(ti['duration_s'], 2)} | {fmt(ti['peak_rss_mb'])} "
            f"| {chunk_rate(ti)} |"
        )
    return "\n".join(lines)


def render(suites: Sequence[Suite], header: str) -> str:
    parts = [header]
    for suite in suites:
        ds = suite.dataset
        parts += [
            f"\n## total {ds['total']:,} ({ds['name']}, in window {ds['in_window']:,}, batch {ds['batch']})\n",
            main_table(suite),
            "",
            pages_table(suite),
            "",
            breakdown(suite),
        ]
        if suite.scheduler:
            parts += ["", scheduler_breakdown(suite.scheduler)]
        parts += [f"\n**CORRECTNESS PROBLEM**: {p}" for p in suite.problems]
    if len(suites) > 1:
        parts += ["\n## growth with the total\n", growth_table(suites)]
    return "\n".join(parts)


def header_text(stack: Stack, load_before: tuple[float, ...]) -> str:
    load_after = os.getloadavg()
    return (
        f"# crawl benchmark {datetime.now(UTC):%Y-%m-%d %H:%M:%S}Z\n\n"
        f"`{' '.join(sys.argv)}`; ref {REF.isoformat()}, window {WINDOW_DAYS:g} d + {TOLERANCE_S // 3600} h; "
        f"source {stack.source_url}, Kafka {stack.bootstrap}; {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after. Ratios compare records/s measured in this run."
    )


def write_json(path: Path, args: argparse.Namespace, suites: Sequence[Suite], markdown: str) -> None:
    """The whole run as JSON (bench/results is git-ignored)."""
    options = {k: v for k, v in vars(args).items() if k != "total_list"}
    document = {
        "created": datetime.now(UTC).isoformat(),
        "argv": sys.argv,
        "options": options,
        "cpus": os.cpu_count(),
        "suites": [asdict(s) for s in suites],
        "markdown": markdown,
    }
    path.write_text(json.dumps(document, indent=2, default=str, ensure_ascii=False))
