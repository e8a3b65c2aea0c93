"""The benchmark's report: markdown tables for stdout, and the whole run as JSON."""

from __future__ import annotations

import argparse
import itertools
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
    """The variants table: wall, pages, records/s, kept published, ratios to the drain, the limit and the old
    loop."""
    drain = suite.variant("source drain")
    old = suite.variant("old algorithm (no sleep")
    limit, bound = suite.limit()
    rows = [
        f"Limit at {suite.latency_ms:g} ms with {suite.in_flight} pages in flight: {fmt(limit)} records/s ({bound}).",
        "",
        "| variant | wall s | pages fetched | records fetched/s | kept published | × drain rate | × limit "
        "| × old (no sleep) | topic keys = truth |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in suite.variants:
        rate = fmt(v.rate) + (" (produced/s)" if v.rate_basis == "produced" else "")
        rows.append(
            f"| {v.name} | {fmt(v.wall_s, 2)} | {fmt(v.pages) if v.pages is not None else '-'} | {rate} "
            f"| {fmt(v.published) if v.published or v.kept else '-'} "
            f"| {fmt(v.rate / drain.rate, 3) if drain else '-'} | {fmt(v.rate / limit, 2)} "
            f"| {fmt(v.rate / old.rate, 2) if old else '-'} | {v.keys.short() if v.keys else '-'} |"
        )
    return "\n".join(rows)


def latency_table(suites: Sequence[Suite]) -> str:
    """The project against the old loop and the limit at each source latency (suites of one total)."""
    rows = [
        "| latency ms | pages in flight | old loop rec/s | project crawl span rec/s | × old | limit rec/s "
        "(measured) | × limit | binding | source with the pages in flight rec/s | in flight × page / latency "
        "| dags test wall s | scheduler trigger→done s |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for s in suites:
        old, span, wall = s.variant("old algorithm (no sleep"), s.variant("project: crawl"), s.variant("project: dags")
        if not (old and span and wall):
            continue
        limit, bound = s.limit()
        computed = s.in_flight * s.dataset["batch"] / (s.latency_ms / 1000) if s.latency_ms else math.inf
        scheduler = s.scheduler.get("run", {}).get("wall_s") if s.scheduler else None
        flight = s.variant("source, ")
        rows.append(
            f"| {s.latency_ms:g} | {s.in_flight} | {fmt(old.rate)} | {fmt(span.rate)} | {fmt(span.rate / old.rate, 2)} "
            f"| {fmt(limit)} | {fmt(span.rate / limit, 2)} | {bound} | {fmt(flight.rate if flight else None)} "
            f"| {fmt(computed)} | {wall.wall_s:.2f} | {fmt(scheduler, 2)} |"
        )
    return "\n".join(rows)


# The crawl's targets: (source latency ms, what the crawl span is held against, the least ratio). Each is measured in
# the same suite as the span, so the ratio holds however loaded the machine was.
TARGETS = (
    (0.0, "min(source drain, sink limit)", 0.8),
    (50.0, "old loop (no sleep)", 5.0),
    (50.0, "limit", 0.8),
    (200.0, "limit", 0.8),
)


def target_basis(suite: Suite, against: str) -> float | None:
    """The rate the crawl span of ``suite`` is held against (None when the suite did not measure it)."""
    if against == "limit":
        limit, _ = suite.limit()
        return None if math.isnan(limit) else limit
    if against.startswith("old loop"):
        old = suite.variant("old algorithm (no sleep")
        return old.rate if old else None
    bounds = [v.rate for v in (suite.variant("source drain"), suite.variant("sink limit")) if v]
    return min(bounds) if bounds else None


def targets_table(suites: Sequence[Suite]) -> str:
    """Each target against the measurement of the suite at its latency (first suite of each latency): the crawl span,
    which the target is about, and beside it the chunk task alone, which shows how much of the gap is the fixed part
    of a run around the chunk."""
    rows = [
        "| source latency ms | crawl span rec/s | held against | its rec/s | ratio | target | met "
        "| chunk task alone rec/s | its ratio |",
        "|---:|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    for latency, against, least in TARGETS:
        suite = next((x for x in suites if x.latency_ms == latency), None)
        span = suite.variant("project: crawl") if suite else None
        basis = target_basis(suite, against) if suite else None
        if suite is None or span is None or not basis:
            rows.append(f"| {latency:g} | - | {against} | - | - | ≥ {least:g} | not measured | - | - |")
            continue
        ratio, chunk = span.rate / basis, suite.chunk_rate()
        rows.append(
            f"| {latency:g} | {fmt(span.rate)} | {against} | {fmt(basis)} | {ratio:.2f} | ≥ {least:g} "
            f"| {'yes' if ratio >= least else 'NO'} | {fmt(chunk)} | {fmt(chunk and chunk / basis, 2)} |"
        )
    return "\n".join(rows)


def pages_table(suite: Suite) -> str:
    """Pages fetched on the first crawl against ceil(in_window / batch) + max_expired_batches (the project's one
    more at most: its search for the window's start stops within a batch, below the start)."""
    ds = suite.dataset
    expected = expected_first_crawl_pages(ds["in_window"], ds["batch"])
    rows = [
        f"First crawl: in_window={ds['in_window']}, batch={ds['batch']}: ceil(in_window/batch) + "
        f"max_expired_batches = {expected - MAX_EXPIRED_BATCHES} + {MAX_EXPIRED_BATCHES} = {expected}; "
        f"log2(total) = {math.log2(ds['total']):.1f}; the project may read one more: it searches the window's start "
        "to within a batch and takes the low end",
        "",
        "| variant | pages fetched | expected | pages served (source log) | 1-record probes | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for v in suite.variants:
        if v.requests is None:
            continue
        want = f"{expected}-{expected + 1}" if v.name.startswith("project") else f"{expected}"
        served = f"{v.requests.pages} | {v.requests.probes} | {v.requests.errors}"
        rows.append(f"| {v.name} | {v.pages} | {want} | {served} |")
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
        f"| task | map | Airflow set-up s | user code s | Airflow post-execute s | batches | fetched | {CHUNK_RATE} "
        "| peak RSS MB while it ran |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for span in timeline["spans"]:
        lines.append(
            f"| {span['task']} | {span['map_index']} | {span['setup_s']:.2f} | {span['user_code_s']:.2f} "
            f"| {span['post_s']:.2f} | {dash(span.get('batches'))} | {fmt(span.get('fetched'))} "
            f"| {chunk_rate(span)} | {fmt(span.get('peak_rss_mb'))} |"
        )
    return "\n".join(lines + components_lines(suite.components) + profile_lines(p.get("profile")))


def profile_lines(profile: Mapping[str, Any] | None) -> list[str]:
    """The top of the chunk's py-spy profile (``--profile``)."""
    if not profile or not profile["samples"]:
        return []
    shares = ", ".join(f"{name} {share * 100:.0f} %" for name, share in profile.get("run", []))
    lines = [
        "",
        f"All py-spy samples of the profiled `dags test` run (every thread): {shares}.",
        "",
        f"Top of the chunk's profile (py-spy, {profile['samples']} samples at {profile['rate_hz']} Hz of the "
        "threads running the chunk loop or its fetches; share of those samples):",
        "",
        "| where the samples were taken (self) | share | crawler_ops function on the stack (inclusive) | share |",
        "|---|---:|---|---:|",
    ]
    rows = itertools.zip_longest(profile["self"], profile["inclusive"], fillvalue=("", None))
    lines += [f"| {a} | {fmt(sa and sa * 100, 1)} % | {b} | {fmt(sb and sb * 100, 1)} % |" for (a, sa), (b, sb) in rows]
    return lines


def components_lines(c: Mapping[str, float]) -> list[str]:
    """The per-page costs of the pieces, when they were measured."""
    if not c:
        return []
    return [
        "",
        f"Per page of {c['records_per_page']:.0f} in-window records (median of {c['pages_sampled']:.0f}): "
        f"GET {c['get_ms']:.1f} ms; project page decode (SourceApiHook.read_page: raw records + date/key fields) "
        f"{c['project_decode_ms']:.1f} ms; project filter+encode (records.build_messages on that page) "
        f"{c['filter_encode_ms']:.2f} ms = {c['filter_encode_us_per_record']:.2f} µs a record; produce+flush "
        f"{c['produce_flush_ms']:.1f} ms. For reference: full msgspec decode {c['decode_ms']:.1f} ms, "
        f"filter+encode of fully decoded records {c['dict_filter_encode_ms']:.1f} ms.",
        *format_lines(c),
    ]


def format_lines(c: Mapping[str, float]) -> list[str]:
    """Per record, each kafka.value_format: filter+encode, produce+flush and the value's size."""
    if "avro_filter_encode_us_per_record" not in c:
        return []
    per = c["records_per_page"]
    rows = [
        ("json", c["filter_encode_us_per_record"], c["produce_flush_ms"], c.get("json_value_bytes", 0.0)),
        *(
            (name, c[f"{name}_filter_encode_us_per_record"], c[f"{name}_produce_flush_ms"], c[f"{name}_value_bytes"])
            for name in ("json_schema", "avro")
        ),
    ]
    base = rows[0][1]
    return [
        "",
        "| kafka.value_format | filter+encode µs/record | × json | produce+flush µs/record | value bytes/record |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {build:.2f} | {build / base:.2f} | {flush * 1000.0 / per:.2f} | {size:.0f} |"
            for name, build, flush, size in rows
        ),
    ]


def growth_table(suites: Sequence[Suite]) -> str:
    """How rates, pages, time and memory grow with the total."""
    rows = [
        "| total | in window | drain rec/s | old rec/s | old pages | project wall s | crawl s | overhead s "
        "| project rec/s (wall) | (crawl) | × limit | pages | expected | probes | chunks | peak RSS MB "
        "| chunk peak RSS MB | keys ok |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    rows += [row for row in map(growth_row, suites) if row]
    return "\n".join(rows)


def growth_row(s: Suite) -> str | None:
    drain, old = s.variant("source drain"), s.variant("old algorithm (no sleep")
    proj, span = s.variant("project: dags"), s.variant("project: crawl")
    if not (drain and old and proj and span):
        return None
    chunk_spans = [x for x in s.project["timeline"]["spans"] if x["task"] == "crawl_chunk"]
    chunk_rss = max((x["peak_rss_mb"] for x in chunk_spans if x.get("peak_rss_mb")), default=None)
    expected = expected_first_crawl_pages(s.dataset["in_window"], s.dataset["batch"])
    return (
        f"| {s.dataset['total']:,} | {s.dataset['in_window']:,} | {fmt(drain.rate)} | {fmt(old.rate)} "
        f"| {old.pages} | {proj.wall_s:.2f} | {span.wall_s:.2f} | {s.project['airflow_overhead_s']:.2f} "
        f"| {fmt(proj.rate)} | {fmt(span.rate)} | {fmt(span.rate / s.limit()[0], 2)} | {proj.pages} "
        f"| {expected}-{expected + 1} "
        f"| {proj.requests.probes if proj.requests else '-'} | {len(chunk_spans)} "
        f"| {s.project['process']['peak_tree_rss_mb']:.0f} | {fmt(chunk_rss)} "
        f"| {'yes' if not s.problems else '**NO**'} |"
    )


def scheduler_breakdown(details: dict[str, Any]) -> str:
    """Where a scheduler-run's time goes: trigger, queueing, each task process, the gaps between them."""
    run = details["run"]
    lines = [
        f"Real scheduler ({details['dataset']}, ref {details['ref_time']}, source latency "
        f"{details.get('latency_ms', 0):g} ms): trigger→done {run['wall_s']:.2f} s "
        f"(`airflow dags trigger` CLI {run['trigger_cli_s']:.2f} s, run queued→started "
        f"{fmt(run['queued_to_start_s'], 2)} s, started→finished {fmt(run['run_s'], 2)} s), crawl span (PG) "
        f"{details['crawl_s']:.2f} s; logs {details['logs']}",
        "",
        "| task | map | start − upstream done s (incl. waiting for a slot) | queued→start s | duration s "
        f"| task process peak RSS MB | {CHUNK_RATE} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += task_rows(details["task_instances"])
    incremental = details.get("incremental")
    if incremental:
        run = incremental["run"]
        lines += [
            "",
            f"Small incremental run ({incremental['appended']} records appended, mode {incremental['mode']}, "
            f"{incremental['pages']} pages, published {incremental['published']}, {incremental['run_status']}): "
            f"queued→done {fmt(sum_or_none(run['queued_to_start_s'], run['run_s']), 2)} s (trigger→done "
            f"{run['wall_s']:.2f} s including the `airflow dags trigger` CLI's own {run['trigger_cli_s']:.2f} s), "
            f"crawl span (PG) {fmt(incremental['crawl_s'], 2)} s",
            "",
            lines[2],
            lines[3],
            *task_rows(incremental["task_instances"]),
        ]
    return "\n".join(lines)


def sum_or_none(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def task_rows(task_instances: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"| {ti['task']} | {ti['map_index']} | {fmt(ti['since_upstream_done_s'], 2)} "
        f"| {fmt(ti['queued_to_start_s'], 2)} | {fmt(ti['duration_s'], 2)} | {fmt(ti['peak_rss_mb'])} "
        f"| {chunk_rate(ti)} |"
        for ti in task_instances
    ]


def render(suites: Sequence[Suite], header: str) -> str:
    parts = [header]
    for suite in suites:
        ds = suite.dataset
        parts += [
            f"\n## total {ds['total']:,}, source latency {suite.latency_ms:g} ms ({ds['name']}, in window "
            f"{ds['in_window']:,}, batch {ds['batch']})\n",
            main_table(suite),
            "",
            pages_table(suite),
            "",
            breakdown(suite),
        ]
        if suite.scheduler:
            parts += ["", scheduler_breakdown(suite.scheduler)]
        parts += [f"\n**CORRECTNESS PROBLEM**: {p}" for p in suite.problems]
    by_latency = [x for x in suites if x.dataset["total"] == suites[0].dataset["total"]]
    if len(by_latency) > 1:
        parts += [f"\n## latency profile, total {suites[0].dataset['total']:,}\n", latency_table(by_latency)]
    parts += ["\n## targets (ratios within this run)\n", targets_table(suites)]
    growth = [x for x in suites if x.latency_ms == suites[0].latency_ms]
    if len(growth) > 1:
        parts += [f"\n## growth with the total (source latency {suites[0].latency_ms:g} ms)\n", growth_table(growth)]
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
