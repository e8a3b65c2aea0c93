"""``crawler-ops check``'s report as text: the problems to fix first, then what the check saw, a few aligned lines
(the status view shows the same text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def render_text(report: Mapping[str, Any]) -> str:
    """A few aligned lines: the problems to fix first, then what the check saw."""
    lines = [f"check of task {report['task']} (source {report['source']}) at {report['checked_at']}"]
    if report.get("error"):
        return "\n".join([*lines, f"  ERROR      {report['error']}"])
    found = report["problems"]
    lines += [f"  FIX        {problem}" for problem in found] or ["  ok         the source suits the task"]
    total, page, keys, dates = report["total"], report["page"], report.get("keys"), report.get("dates")
    lines.append(f"  total      {total['value']} ({total['how']})")
    lines.append(
        f"  page       {page['where']}: {show_count(page['records'])} records at '{page['records_path']}'"
        + (
            f" (suggested: {', '.join(repr(s['path']) for s in page['suggested_paths'])})"
            if page["suggested_paths"]
            else ""
        )
    )
    if "next" in page:
        lines.append(f"  next       {page['next'] or 'none: the feed ends with its first page'}")
    if keys:
        lines.append(
            "  keys       "
            + (
                f"'{keys['field']}' on {keys['present']} of {keys['records']}, "
                + ("unique" if keys["unique"] else "REPEATED")
                if keys["field"]
                else "no kafka.key_field: a hash of each record"
            )
        )
    if dates:
        for field in dates["fields"]:
            seen = ", ".join(f"{name} {n}" for name, n in field["formats"].items()) or "no readable value"
            bad = f"; unreadable {field['unparsed']}: {field['unparsed_examples']}" if field["unparsed"] else ""
            lines.append(f"  date       {field['field']}: on {field['present']} of {dates['records']}: {seen}{bad}")
        lines.append(
            f"  window     {dates['in_window']} of {dates['records']} in [{dates['window']['start']}, "
            f"{dates['window']['end']}], {dates['older']} older, {dates['undated']} without a date"
        )
    order = report.get("order")
    if order:
        lines.append(f"  order      {order['verdict']} (as the crawl assumes, {order['assumption']}?): {steps(order)}")
    if report.get("disorder"):
        lines.append(f"  disorder   {disorder_words(report['disorder'])}")
    sample = report.get("sample_message")
    if sample:
        lines.append(f"  message    topic {sample['topic']} key {sample['key']} headers {dict(sample['headers'])}")
        lines.append(f"             value {shorten(sample['value'], 160)}")
    schema = report.get("schema")
    if schema:
        lines.append(
            f"  schema     {schema_fields(schema['json_schema'])} (from {schema['records']} records"
            + (", before the task's transform" if schema["before_transform"] else "")
            + "; the JSON Schema and the Avro schema: --json)"
        )
    lines += registry_lines(report.get("registry"))
    crawl = report.get("first_crawl")
    if crawl:
        lines.append(
            f"  estimate   a first crawl: {span(crawl['requests'])} requests, {span(crawl['seconds'])} s at "
            f"{crawl['rate']['requests_per_s'] or 'unlimited'} requests/s, {crawl['rate']['parallel']} in parallel "
            f"({span(crawl['records_in_window'])} records in the window; {crawl['basis']})"
        )
    lines.append(f"  requests   {report['requests']} made by this check")
    return "\n".join(lines)


def registry_lines(registry: Mapping[str, Any] | None) -> list[str]:
    """The value schema line: the subject, the schema the next plan writes with, and how the page fits it."""
    if not registry:
        return []
    head = f"  registry   {registry['format']} under {registry['subject']}: "
    if "error" in registry:
        return [head + f"cannot be read: {registry['error']}"]
    fit = f"{registry['records'] - registry['misfits']} of {registry['records']} page records fit"
    lines = [head + f"{registry['schema']}; {fit}"]
    if registry["misfits"]:
        lines.append(f"             {registry['why']}: {registry['outcome']}")
    return lines


def schema_fields(schema: Mapping[str, Any]) -> str:
    """The top-level fields of an inferred JSON Schema in a few words: ``id integer, aae397 string?`` (``?``: not
    in every record, or null in some)."""
    required = set(schema.get("required", ()))
    words = []
    for name, field in schema.get("properties", {}).items():
        types = field.get("type", "any")
        kinds = [t for t in ([types] if isinstance(types, str) else types) if t != "null"] or ["null"]
        optional = name not in required or "null" in (types if isinstance(types, list) else [types])
        words.append(f"{name} {'|'.join(kinds) if 'anyOf' not in field else 'mixed'}{'?' if optional else ''}")
    return ", ".join(words) or "no fields"


def show_count(value: int | None) -> str:
    return "no list of" if value is None else str(value)


def span(pair: Sequence[Any]) -> str:
    return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}-{pair[1]}"


def shorten(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def steps(order: Mapping[str, Any]) -> str:
    """The order's evidence in words: steps between neighbouring records, and the dates at either end (by offset, or,
    on a feed's page, by place in the listing)."""
    evidence = order["evidence"]
    if "first_listed" in evidence:
        first, last = evidence["first_listed"], evidence["last_listed"]
        return (
            f"{evidence['rising_steps']} steps older down the page, {evidence['falling_steps']} newer; listed "
            f"{first['listed']} {first['date']} .. listed {last['listed']} {last['date']}"
        )
    ends = ""
    if "lowest" in evidence:
        low, high = evidence["lowest"], evidence["highest"]
        ends = f", offset {low['offset']} {low['date']} .. offset {high['offset']} {high['date']}"
    return f"{evidence['rising_steps']} steps up, {evidence['falling_steps']} down{ends}"


def disorder_words(found: Mapping[str, Any]) -> str:
    """The page's disorder against what a backfill that probes for its interval tolerates."""
    seen = f"records out of date order at most {found['offsets']} offsets apart on this page ({found['records']} dated)"
    margin = found["backfill_margin"]
    if margin is None:
        return f"{seen}; backfills read the source's filtered view (window_filter), which needs no margin"
    if found["backfill_reads_all"]:
        return f"{seen}: fewer than the {margin} a probing backfill reads beyond each end of its interval"
    return (
        f"{seen}: a probing backfill reads only {margin} beyond each end of its interval and may miss records; raise "
        "backfill_margin_batches past that distance, or give the source a window_filter"
    )
