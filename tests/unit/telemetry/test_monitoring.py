"""The monitoring files agree with the code: every metric the Grafana dashboard queries is produced by the
statsd_exporter mapping from a name crawler_ops emits (names from :mod:`crawler_ops.telemetry.metrics`), and the
gauges of one task are computed from its stored state as documented."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawler_ops.ops.gauges import task_gauges
from crawler_ops.results import METRIC_COUNTERS
from crawler_ops.telemetry import metrics
from tests.support import make_task

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "include" / "deploy" / "monitoring"
# Names with dots, as task ids and consumer groups may have them.
TASK, GROUP, EXECUTOR = "jobs.beijing", "jobs_beijing.downstream_sample", "area_addresses"
PROMQL_METRIC = re.compile(r"\b(crawler_ops_[a-z0-9_]+)\s*(\{[^}]*\})?")
# What the dashboard must show, by the code's metric names.
DASHBOARD_MUST_SHOW = (
    "backlog",
    "consumer_lag",
    "seconds_since_success",
    "last_run_duration_s",
    "last_run_records_per_s",
    "parked_batches",
    "published",
    "kept",
)


def statsd_prefix() -> str:
    from airflow.configuration import conf

    return conf.get("metrics", "statsd_prefix")


@pytest.fixture(scope="module")
def mappings() -> list[dict[str, Any]]:
    document = yaml.safe_load((MONITORING / "statsd_mapping.yml").read_text(encoding="utf-8"))
    return list(document["mappings"])


def glob_regex(match: str) -> re.Pattern[str]:
    """statsd_exporter's glob: ``*`` stands for one dot-free part of the name."""
    return re.compile("^" + re.escape(match).replace(r"\*", "([^.]+)") + "$")


def map_name(mappings: list[dict[str, Any]], stat: str) -> tuple[dict[str, Any], str, dict[str, str]]:
    """The first mapping matching ``stat`` (as statsd_exporter takes it), the Prometheus name and the labels."""
    for mapping in mappings:
        found = glob_regex(mapping["match"]).match(stat)
        if found:

            def fill(text: str, found: re.Match[str] = found) -> str:
                return re.sub(r"\$\{?(\d+)\}?", lambda m: found.group(int(m.group(1))), text)

            return mapping, fill(mapping["name"]), {k: fill(v) for k, v in mapping.get("labels", {}).items()}
    raise AssertionError(f"no mapping matches {stat}")


def emitted(mappings: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, str], dict[str, Any]]]:
    """Code name (e.g. ``crawler_ops.jobs__beijing.backlog``) -> Prometheus name, labels, mapping."""
    result = {}
    for stat in metrics.emitted_names(TASK, GROUP, EXECUTOR):
        mapping, name, labels = map_name(mappings, f"{statsd_prefix()}.{stat}")
        result[stat] = (name, labels, mapping)
    return result


def dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana_dashboard.json").read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    assert exprs, "the dashboard has no queries"
    return exprs


def test_every_emitted_name_is_mapped_with_its_task_and_group_as_labels(mappings):
    produced = emitted(mappings)

    for stat, (name, labels, mapping) in produced.items():
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name), stat
        part = stat.split(".")
        if stat.startswith(f"{metrics.TASK_PREFIX}."):
            assert labels["task_id"] == metrics.name_part(TASK) == part[1], stat
            kind = "counter" if part[2] in METRIC_COUNTERS else "gauge"
            assert mapping["match_metric_type"] == kind, stat
        else:
            assert labels["executor"] == metrics.name_part(EXECUTOR), stat
            assert mapping["match_metric_type"] == "gauge", stat
    lag = produced[metrics.task_metric(TASK, "consumer_lag", GROUP)][1]
    assert lag == {"task_id": "jobs__beijing", "group": "jobs_beijing__downstream_sample"}
    counters = [produced[metrics.task_metric(TASK, c)][0] for c in METRIC_COUNTERS]
    assert all(name.endswith("_total") for name in counters), "Prometheus counters end in _total"


def test_every_mapping_is_used_and_every_prometheus_name_comes_from_one_code_name(mappings):
    produced = emitted(mappings)
    used = {id(mapping) for _, _, mapping in produced.values()}
    assert [m["match"] for m in mappings if id(m) not in used] == []
    series = [(name, tuple(sorted(labels.items()))) for name, labels, _ in produced.values()]
    assert len(set(series)) == len(series), "two code names became the same Prometheus series"


def test_every_metric_the_dashboard_queries_is_produced_by_the_mapping_with_its_labels(mappings):
    produced = {name: set(labels) for name, labels, _ in emitted(mappings).values()}

    queried = [(m.group(1), m.group(2) or "") for expr in dashboard_queries() for m in PROMQL_METRIC.finditer(expr)]

    assert queried
    for name, selector in queried:
        assert name in produced, f"the dashboard queries {name}, which no mapping produces"
        used_labels = set(re.findall(r"(\w+)\s*[=!]~?", selector))
        assert used_labels <= produced[name], (name, used_labels)


def test_the_dashboard_shows_each_required_metric(mappings):
    produced = emitted(mappings)
    queried = {m.group(1) for expr in dashboard_queries() for m in PROMQL_METRIC.finditer(expr)}

    for code_name in DASHBOARD_MUST_SHOW:
        group = GROUP if code_name in metrics.GROUP_GAUGES else None
        assert produced[metrics.task_metric(TASK, code_name, group)][0] in queried, code_name


@pytest.mark.parametrize(
    ("value", "part"),
    [("jobs.beijing", "jobs__beijing"), ("a-b_c9", "a-b_c9"), ("组:x y", "__x_y")],
    ids=["dot", "safe", "other-characters"],
)
def test_name_parts_hold_no_dots_or_characters_statsd_rejects(value, part):
    assert metrics.name_part(value) == part


def test_task_gauges_come_from_the_stored_row_and_backlog_is_total_minus_watermark():
    cfg = make_task("t1")
    stored = {
        "total": 1000,
        "watermark": 600,
        "parked_batches": 2,
        "seconds_since_success": 30.5,
        "last_run_duration_s": 4.0,
        "last_run_fetched": 800,
    }

    gauges = task_gauges(cfg, stored, live=False)

    assert gauges.values == {
        "total": 1000.0,
        "watermark": 600.0,
        "parked_batches": 2.0,
        "seconds_since_success": 30.5,
        "last_run_duration_s": 4.0,
        "last_run_records_per_s": 200.0,
        "backlog": 400.0,
        "scrape_errors": 0.0,
    }
    assert set(gauges.values) <= set(metrics.TASK_GAUGES)


def test_a_task_that_never_ran_has_no_parked_batches_and_a_database_error_is_a_scrape_error():
    cfg = make_task("t1")

    assert task_gauges(cfg, {}, live=False).values == {"parked_batches": 0.0, "scrape_errors": 0.0}
    failed = task_gauges(cfg, "PostgreSQL (crawler_db): OperationalError: down", live=False)
    assert failed.values == {"scrape_errors": 1.0}
    assert failed.errors == ["PostgreSQL (crawler_db): OperationalError: down"]
