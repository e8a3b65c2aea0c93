"""OpenLineage from a real crawl: `airflow dags test` with the provider's file transport, read back event by event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from tests.support import make_task, read_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REF = datetime(2026, 11, 1, tzinfo=UTC)


def crawl_with_openlineage(cfg: CrawlTaskConfig, events: Path, *args: str) -> list[dict[str, Any]]:
    """Run the task's DAG with `airflow dags test` in its own process (the provider registers its listener when
    its plugin loads, so OpenLineage is configured before the process starts) and return the events it wrote."""
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "crawler_ops_test",
    }
    env.pop("AIRFLOW__OPENLINEAGE__DISABLED", None)
    airflow = str(Path(sys.executable).parent / "airflow")
    run = subprocess.run(
        [airflow, "dags", "test", cfg.dag_id, REF.isoformat(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert events.exists(), "the run wrote no OpenLineage event"
    return [json.loads(line) for line in events.read_text().splitlines() if line.strip()]


def task_events(events: list[dict[str, Any]], cfg: CrawlTaskConfig, task_id: str) -> list[dict[str, Any]]:
    return [e for e in events if e["job"]["name"] == f"{cfg.dag_id}.{task_id}" and e["eventType"] == "COMPLETE"]


def datasets(event: dict[str, Any], side: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event[side]]


def test_a_crawl_emits_the_source_as_input_and_the_topic_as_output_named_like_the_topic_asset(
    source, source_url, kafka_bootstrap, unique_id, tmp_path, use_config
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=2)
    use_config(cfg)

    events = crawl_with_openlineage(cfg, tmp_path / "openlineage.jsonl")

    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic)) == 1_000
    source_dataset = (source_url.rstrip("/"), f"/api/{unique_id}/list")  # the demo source is http://127.0.0.1:port
    topic_dataset = (f"kafka://{kafka_bootstrap}", cfg.kafka.topic)
    chunks = task_events(events, cfg, "crawl_chunk")
    assert len(chunks) == 2, [e["job"]["name"] for e in events]
    for chunk in chunks:
        assert datasets(chunk, "inputs") == [source_dataset]
        assert datasets(chunk, "outputs") == [topic_dataset]
        assert chunk["job"]["namespace"] == "crawler_ops_test"

    # The DAG's Asset: by default kafka://<bootstrap server>/<topic> (the stack defines the Kafka connection in the
    # environment). The provider turns the announce task's Asset outlet into the same dataset the chunks wrote.
    assert cfg.kafka.asset_uri == f"kafka://{kafka_bootstrap}/{cfg.kafka.topic}"
    (announce,) = task_events(events, cfg, "announce")
    assert datasets(announce, "outputs") == [topic_dataset]


def test_a_dry_run_reads_the_source_and_writes_no_dataset(source, source_url, unique_id, tmp_path, use_config):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=1)
    use_config(cfg)

    events = crawl_with_openlineage(cfg, tmp_path / "openlineage.jsonl", "-c", json.dumps({"dry_run": True}))

    (chunk,) = task_events(events, cfg, "crawl_chunk")
    assert datasets(chunk, "inputs") == [(source_url.rstrip("/"), f"/api/{unique_id}/list")]
    assert datasets(chunk, "outputs") == []
