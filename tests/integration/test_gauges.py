"""The gauges DAG on the real stack: it runs with ``dag.test()`` against PostgreSQL, Kafka and the demo source and
sends its gauges to a real StatsD listener on loopback; each value equals what PostgreSQL, Kafka and the source
say, and a task whose source is down gets an error gauge without failing the round or hiding the other task."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from airflow import settings

from crawler_ops.config import load_config
from crawler_ops.executor import run_worker, sync_rows
from crawler_ops.factory.gauges import build_gauges_dags
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.hooks.store.status_table import STATUS_NAMES
from crawler_ops.planning import Batch
from crawler_ops.telemetry import metrics
from tests.integration.executor_lease_support import FUNCTIONS, executor, make_source
from tests.support import StatsdCollector, make_task, query, read_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REF = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdCollector]:
    """Airflow's metrics in this process sent to a StatsD listener on loopback (as ``[metrics]`` configures them),
    back to none afterwards."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    collector = StatsdCollector()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(collector.port))
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield collector
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)


def park_a_batch(cfg_id: str, lo: int, hi: int) -> None:
    """A batch above the watermark that failed its only attempt: parked through the status-table protocol."""
    store = CrawlStoreHook("crawler_db", cfg_id)
    batch, token = Batch(lo, hi), uuid.uuid4().hex
    try:
        with store.transaction() as cur:
            store.batches.insert(cur, [batch], "gauges-test")
            assert store.batches.claim(cur, batch, "gauges-test", token, 60)
            assert store.batches.release(cur, batch, token, "SourceError: boom", max_attempts=1)
    finally:
        store.close()


def test_the_gauges_dag_emits_what_postgresql_kafka_and_the_source_say(
    source, run_dag, unique_id, pg_uri, pg_schema, kafka_bootstrap, monkeypatch, tmp_path, statsd
):
    group = f"g_{unique_id}"
    crawled = make_task(unique_id, kafka={"consumer_groups": [group]})
    source.create(unique_id, total=1_000, ref=REF, in_window_share=0.5)
    assert run_dag(crawled, REF) == "success"
    source.append(unique_id, 250)
    park_a_batch(unique_id, 1_000, 1_100)
    down = make_task(f"{unique_id}_down", source={"conn_id": "nowhere"})
    monkeypatch.setenv("AIRFLOW_CONN_NOWHERE", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 9}))
    make_source(pg_uri, pg_schema, ["A"] * 5)
    rows = executor(pg_schema, f"x{unique_id}", function=f"{FUNCTIONS}.fail_always", max_attempts=1, cycle_index=2)
    sync_rows(rows)
    run_worker(rows, "gauges-test", 0)
    document = {
        "tasks": [crawled.model_dump(mode="json"), down.model_dump(mode="json")],
        "executors": [rows.model_dump(mode="json")],
        "maintenance": {"gauges_schedule": "*/5 * * * *"},
    }
    config = tmp_path / "gauges.yaml"
    config.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    # dag.test() serialises the DAGs of the dags folder: this repository's, which defines the gauges DAG.
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(REPO / "dags"))

    dag = build_gauges_dags(load_config(config))["crawler_ops_gauges"]
    assert str(dag.test().state) == "success"

    def gauge(task: str, name: str, group: str | None = None) -> float:
        return statsd.wait_for_gauge(f"airflow.{metrics.task_metric(task, name, group)}")

    ((total, mark),) = query(pg_uri, "SELECT total, watermark FROM crawler_ops.progress WHERE task_id = %s", unique_id)
    ((parked,),) = query(
        pg_uri, "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 3", unique_id
    )
    ((duration, fetched, age),) = query(
        pg_uri,
        "SELECT duration_s, fetched, extract(epoch FROM now() - finished_at)::float8 FROM crawler_ops.crawl_run "
        "WHERE task_id = %s AND status = 'success'",
        unique_id,
    )
    assert (total, mark, parked) == (1_000, 1_000, 1)
    assert gauge(unique_id, "source_total") == 1_250
    assert gauge(unique_id, "backlog") == 1_250 - mark
    assert (gauge(unique_id, "total"), gauge(unique_id, "watermark")) == (total, mark)
    assert gauge(unique_id, "parked_batches") == parked
    assert gauge(unique_id, "last_run_duration_s") == pytest.approx(duration)
    assert gauge(unique_id, "last_run_records_per_s") == pytest.approx(fetched / duration)
    assert age - 300 < gauge(unique_id, "seconds_since_success") <= age, "measured during the round, before now"
    published = len(read_topic(kafka_bootstrap, crawled.kafka.topic))
    assert published > 0
    assert gauge(unique_id, "consumer_lag", group) == published, "a group that never committed lags by everything"
    assert gauge(unique_id, "scrape_errors") == 0

    assert gauge(down.id, "scrape_errors") == 1, "the source that is down"
    assert gauge(down.id, "parked_batches") == 0
    emitted_for_down = {k for k in statsd.gauges() if k.startswith(f"airflow.{metrics.task_metric(down.id, '')}")}
    assert not any(k.endswith((".backlog", ".source_total")) for k in emitted_for_down), "no made-up totals"

    table = f'"{pg_schema}".status_table'
    by_status = dict(query(pg_uri, f"SELECT status, count(*) FROM {table} WHERE task_name = %s GROUP BY 1", rows.name))
    assert by_status == {0: 3, 3: 2}
    for status, name in STATUS_NAMES.items():
        stat = f"airflow.{metrics.executor_metric(rows.name, 'rows', name)}"
        assert statsd.wait_for_gauge(stat) == by_status.get(status, 0), name
