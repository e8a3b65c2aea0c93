"""Operations on the real services: run history, errors and dead letters, the status CLI, webhooks, Assets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from confluent_kafka import Consumer

from crawler_ops.config import CrawlTaskConfig
from tests.support import make_task, query, read_topic, run_record, verified, watermark

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REF = datetime(2026, 11, 1, tzinfo=UTC)
TOLERANCE_S = 24 * 3600


# --------------------------------------------------------------------------- run history, errors, dead letters


def test_the_run_history_row_holds_the_summary_of_what_reached_kafka(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=0.6)
    source.faults(unique_id, bad_date_share=0.05)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    row = run_record(pg_uri, unique_id)
    published = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert row["status"] == "success" and row["mode"] == "first"
    assert row["old_watermark"] is None and row["new_watermark"] == 1_000 == watermark(pg_uri, unique_id)
    assert row["published"] == row["kept"] == len(published) == len(truth["in_window_ids"])
    assert row["dead_lettered"] == len(truth["bad_date_ids"]) > 0
    assert row["fetched"] == row["kept"] + row["expired"] + row["dead_lettered"]
    assert row["planned"] >= row["pages"] > 0
    assert row["finished_at"] > row["started_at"]
    assert row["duration_s"] == pytest.approx((row["finished_at"] - row["started_at"]).total_seconds())
    assert row["errors"] == []


def test_dead_letters_go_to_the_error_table_and_the_dead_letter_topic(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=600, ref=REF, in_window_share=1.0)
    source.faults(unique_id, bad_date_share=0.1)
    cfg = make_task(unique_id, kafka={"dead_letter_topic": f"test.{unique_id}.dead"})

    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    rows = query(
        pg_uri,
        "SELECT source_offset, offset_end, reason, record, run_id FROM crawler_ops.crawl_error "
        "WHERE task_id = %s AND kind = 'record'",
        unique_id,
    )
    assert sorted(r[3]["id"] for r in rows) == sorted(truth["bad_date_ids"])
    assert all(r[1] is None and "unparseable" in r[2] and r[3]["aae397"] == "not-a-date" for r in rows)
    dead = read_topic(kafka_bootstrap, f"test.{unique_id}.dead")
    assert sorted(m.key for m in dead) == sorted(truth["bad_date_ids"])
    by_key = {m.key: m for m in dead}
    for offset, _end, reason, record, run_id in rows:
        message = by_key[record["id"]]
        assert message.value == {
            "task": unique_id,
            "run_id": run_id,
            "source_offset": offset,
            "reason": reason,
            "record": record,
        }
        assert message.headers["reason"] == reason and message.headers["source_offset"] == str(offset)
    main = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert not {m.key for m in main} & set(truth["bad_date_ids"])
    assert run_record(pg_uri, unique_id)["published"] == len(main), "dead letters are not counted as published"


def test_a_failing_batch_is_an_error_row_naming_its_offsets(source, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    source.faults(unique_id, fail_offsets=[260])  # not an offset the first crawl's window probe reads
    cfg = make_task(unique_id, max_chunks=1)

    assert run_dag(cfg, REF) == "failed"

    rows = query(
        pg_uri,
        "SELECT kind, source_offset, offset_end, reason FROM crawler_ops.crawl_error WHERE task_id = %s",
        unique_id,
    )
    assert len(rows) == 1
    kind, lo, hi, reason = rows[0]
    assert (kind, lo, hi) == ("batch", 200, 300), "the batch whose page failed (the one before it was finished first)"
    assert "HTTP 500" in reason and "[200, 300)" in reason
    assert run_record(pg_uri, unique_id)["status"] == "failed"


def test_a_failing_plan_is_an_error_row(source, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    source.faults(unique_id, wrong_shape=True)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "failed"

    rows = query(pg_uri, "SELECT kind, reason FROM crawler_ops.crawl_error WHERE task_id = %s", unique_id)
    assert [r[0] for r in rows] == ["plan"] and "plan: SourceError" in rows[0][1]


# --------------------------------------------------------------------------- status CLI


def consume_and_commit(bootstrap: str, topic: str, group: str, n: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = 0
    while read < n:
        message = consumer.poll(10)
        assert message is not None, "the topic has fewer messages than the test reads"
        if message.error() is None:
            read += 1
            consumer.commit(message, asynchronous=False)
    consumer.close()


def status_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "crawler_ops", "status", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_status_cli_shows_progress_runs_errors_and_consumer_lag(
    source, kafka_bootstrap, pg_uri, unique_id, tmp_path, run_dag, use_config
):
    source.create(unique_id, total=700, ref=REF, in_window_share=1.0)
    source.faults(unique_id, bad_date_share=0.05)
    group = f"g_{unique_id}"
    cfg = make_task(unique_id, name="状态测试", kafka={"consumer_groups": [group, f"{group}_idle"]})
    assert run_dag(cfg, REF) == "success"
    source.clear_faults(unique_id)
    source.append(unique_id, 50)
    published = len(read_topic(kafka_bootstrap, cfg.kafka.topic))
    consume_and_commit(kafka_bootstrap, cfg.kafka.topic, group, 40)
    use_config(cfg)

    result = status_cli("--task", unique_id, "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (row,) = report["tasks"]
    record = run_record(pg_uri, unique_id)
    assert row["task_name"] == "状态测试" and row["dag_id"] == f"crawl_{unique_id}"
    assert row["source_total"] == 750 and row["total"] == 700 and row["watermark"] == 700
    assert row["status"] == "completed" and row["running"] is False
    assert row["produced_count"] == row["filtered_count"] == published
    assert row["last_run"]["run_id"] == record["run_id"] and row["last_run"]["status"] == "success"
    assert row["last_run"]["dead_lettered"] == record["dead_lettered"] > 0
    assert row["errors_24h"]["records"] == record["dead_lettered"]
    assert row["kafka"]["messages"] == published
    assert row["kafka"]["groups"][group]["lag"] == published - 40
    assert row["kafka"]["groups"][f"{group}_idle"]["lag"] == published, "no commits: everything is lag"
    assert row["progress"] == f"{100 * 700 / 750:.1f}%"

    text = status_cli("--task", unique_id)
    assert text.returncode == 0, text.stderr
    assert f"{unique_id} (状态测试)" in text.stdout and f"{group} lag {published - 40}" in text.stdout
    assert "source total 750" in text.stdout and "watermark 700" in text.stdout


def test_status_cli_names_an_unknown_task_and_survives_an_unreachable_source(unique_id, monkeypatch, stack, use_config):
    cfg = make_task(unique_id, source={"conn_id": "nowhere"})
    use_config(cfg)
    monkeypatch.setenv("AIRFLOW_CONN_NOWHERE", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 9}))

    missing = status_cli("--task", "no_such_task")
    report = status_cli("--json")

    assert missing.returncode == 2 and "no crawl task 'no_such_task'" in missing.stderr
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["tasks"]
    assert row["status"] == "never run" and row["source_total"] is None
    assert "count failed" in row["source_error"] and "Connection refused" in row["source_error"]
    assert row["kafka"] == {"error": f"topic '{cfg.kafka.topic}' does not exist yet", "groups": {}}


# --------------------------------------------------------------------------- webhooks


def test_webhooks_are_signed_and_carry_the_run_summary(source, receiver, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=400, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, notify={"conn_id": f"hook_{unique_id}"}, retries=1)

    assert run_dag(cfg, REF) == "success"

    (request,) = receiver.requests
    body = verified(request)
    record = run_record(pg_uri, unique_id)
    assert request["path"] == "/hooks/crawl" and request["headers"]["X-Crawler-Ops-Event"] == "run.success"
    assert body["event"] == "run.success" and body["task"] == unique_id
    summary = body["summary"]
    assert summary["run_id"] == record["run_id"] and summary["status"] == "success"
    for key in ("planned", "fetched", "kept", "published", "expired", "dead_lettered"):
        assert summary[key] == record[key], key
    assert summary["new_watermark"] == 400 and summary["duration_s"] > 0

    source.faults(unique_id, fail_offsets=[450])
    source.append(unique_id, 200)
    assert run_dag(cfg, REF) == "failed"

    assert len(receiver.requests) == 2, "one notification per failed run, not one per retry"
    failure = verified(receiver.requests[1])
    assert failure["event"] == "run.failure" and failure["summary"]["unfinished_batches"] == 1
    assert any("[400, 500)" in e for e in failure["summary"]["errors"])


def test_a_run_started_webhook_carries_the_plan_when_asked_for(source, receiver, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    notify = {"conn_id": f"hook_{unique_id}", "on": ["started", "success", "failure"]}
    cfg = make_task(unique_id, notify=notify)

    assert run_dag(cfg, REF) == "success"
    assert run_dag(cfg, REF, {"dry_run": True}) == "success"

    events = [verified(r) for r in receiver.requests]
    expected = ["run.started", "run.success", "run.success"]
    assert [e["event"] for e in events] == expected, "a dry run reports its end, not a start"
    started, success, _ = events
    assert [r["headers"]["X-Crawler-Ops-Event"] for r in receiver.requests] == expected
    assert started["summary"] == {
        "task": unique_id,
        "run_id": success["summary"]["run_id"],
        "mode": "first",
        "ref": REF.isoformat(),
        "total": 300,
        "watermark": None,
        "planned": run_record(pg_uri, unique_id)["planned"],
    }


def test_a_webhook_that_fails_or_must_not_be_sent_does_not_fail_the_run(
    source, receiver, unique_id, monkeypatch, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, notify={"conn_id": f"hook_{unique_id}"})
    connection = f"AIRFLOW_CONN_HOOK_{unique_id.upper()}"

    def run_with_new_records(cfg: CrawlTaskConfig = cfg) -> int:
        """Append records, run, and return how many requests reached the receiver meanwhile."""
        before = len(receiver.requests)
        source.append(unique_id, 100)
        assert run_dag(cfg, REF) == "success", "a notification problem never fails the run"
        return len(receiver.requests) - before

    receiver.status = 500
    assert run_with_new_records() == 3, "a 5xx is retried, then given up"
    receiver.status = 400
    assert run_with_new_records() == 1, "a 4xx is not retried"
    receiver.status = 200
    monkeypatch.setenv(connection, json.dumps({"conn_type": "http", "host": receiver.url, "password": ""}))
    assert run_with_new_records() == 0, "an empty secret: nothing sent"
    monkeypatch.setenv(connection, json.dumps({"conn_type": "http", "host": receiver.url, "password": "s3cret-秘密"}))
    failures_only = make_task(unique_id, notify={"conn_id": f"hook_{unique_id}", "on": ["failure"]})
    assert run_with_new_records(failures_only) == 0, "success is not among notify.on"
    assert run_with_new_records() == 1, "the same connection, when success is wanted"
    malformed = {"conn_type": "http", "host": "http://127.0.0.1:port/x", "password": "s"}
    monkeypatch.setenv(connection, json.dumps(malformed))
    assert run_with_new_records() == 0, "a malformed URL: not sent"
    unreachable = {"conn_type": "http", "host": "http://127.0.0.1:9/none", "password": "s"}
    monkeypatch.setenv(connection, json.dumps(unreachable))
    assert run_with_new_records() == 0


def test_the_listener_closes_a_run_left_running_and_reports_each_run_once(
    source, receiver, pg_uri, unique_id, run_dag, use_config
):
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import plan_run
    from crawler_ops.ops.listener import close_run

    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, notify={"conn_id": f"hook_{unique_id}"})
    assert run_dag(cfg, REF) == "success"
    committed = run_record(pg_uri, unique_id)
    use_config(cfg)

    close_run(cfg.dag_id, committed["run_id"], "a retry marked the DAG run failed")

    assert [verified(r)["event"] for r in receiver.requests] == ["run.success"], "its commit already reported it"
    assert run_record(pg_uri, unique_id)["status"] == "success"

    source.append(unique_id, 200)
    plan_run(RunContext(cfg=cfg, run_id="left-running", ref=REF, params=RunParams()))  # then marked failed in the UI
    close_run(cfg.dag_id, "left-running", "marked failed in the UI")
    close_run(cfg.dag_id, "left-running", "marked failed in the UI")

    record = run_record(pg_uri, unique_id)
    assert (record["run_id"], record["status"]) == ("left-running", "failed") and record["finished_at"] is not None
    assert record["errors"] == ["the DAG run failed without a commit: marked failed in the UI"]
    assert [verified(r)["event"] for r in receiver.requests] == ["run.success", "run.failure"]
    summary = verified(receiver.requests[1])["summary"]
    assert (summary["run_id"], summary["status"], summary["new_watermark"]) == ("left-running", "failed", 300)
    assert watermark(pg_uri, unique_id) == 300


# --------------------------------------------------------------------------- Assets


def asset_events(uri: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
        ).all()
    return [row[0] for row in rows]


def test_commit_emits_the_topic_asset_with_the_summary_only_when_records_were_published(
    source, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"asset_host": "broker.test:9092"})

    assert run_dag(cfg, REF) == "success"

    (extra,) = asset_events(f"kafka://broker.test:9092/test.{unique_id}")
    record = run_record(pg_uri, unique_id)
    assert extra["run_id"] == record["run_id"] and extra["published"] == 300 == record["published"]
    assert extra["topic"] == cfg.kafka.topic and extra["new_watermark"] == 300

    assert run_dag(cfg, REF) == "success", "nothing new: announce is skipped, the run succeeds"
    assert len(asset_events(f"kafka://broker.test:9092/test.{unique_id}")) == 1, "no event without new records"


def test_a_run_row_left_running_without_an_airflow_run_shows_as_abandoned(pg_uri, unique_id, tmp_path, use_config):
    from crawler_ops.hooks.store.hook import CrawlStoreHook

    store = CrawlStoreHook("crawler_db", unique_id)
    with store.transaction() as cur:
        store.ensure_schema(cur)
    query(
        pg_uri,
        "INSERT INTO crawler_ops.crawl_run (task_id, run_id, mode, ref_time) VALUES (%s, 'cancelled', 'first', now()) "
        "RETURNING run_id",
        unique_id,
    )
    use_config(make_task(unique_id))

    result = status_cli("--task", unique_id, "--json", "--no-live")

    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["tasks"]
    assert row["running"] is False and row["last_run"]["run_id"] == "cancelled"
    assert row["last_run"]["status"] == "abandoned" and "kafka" not in row and "source_total" not in row


def test_a_dead_letter_kafka_refuses_keeps_its_batch_not_done_until_it_is_delivered(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    dlq = f"test.{unique_id}.dead"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(dlq, 1, 1, config={"max.message.bytes": "100"})])[dlq].result(30)
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, bad_date_share=0.02)
    cfg = make_task(unique_id, max_chunks=1, kafka={"dead_letter_topic": dlq})

    assert run_dag(cfg, REF) == "failed", "the broker refuses every dead-letter message"

    rows = query(pg_uri, "SELECT id, hi, status FROM crawler_ops.batch_status WHERE task_name = %s", unique_id)
    done = [(lo, hi) for lo, hi, status in rows if status == 2]
    offsets = {int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}
    assert all(set(range(lo, hi)) <= offsets for lo, hi in done), "a done batch had no dead letter to lose"
    # The newest batch failed first: nothing below it is done, so there is no watermark yet (or one below the top).
    assert len(done) < len(rows) and (watermark(pg_uri, unique_id) or 0) < 1_000
    assert read_topic(kafka_bootstrap, dlq) == []
    (error,) = query(pg_uri, "SELECT reason FROM crawler_ops.crawl_error WHERE task_id = %s", unique_id)
    assert f"'{dlq}'" in error[0] and "not done" in error[0]

    entry = ConfigEntry("max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, dlq, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert sorted(m.key for m in read_topic(kafka_bootstrap, dlq)) == sorted(truth["bad_date_ids"])
    assert watermark(pg_uri, unique_id) == 1_000


def test_a_retried_commit_does_not_count_the_run_twice(source, pg_uri, unique_id, run_dag):
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import commit_run

    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    before = query(
        pg_uri, "SELECT filtered_count, produced_count FROM crawler_ops.progress WHERE task_id = %s", unique_id
    )
    record = run_record(pg_uri, unique_id)

    again = commit_run(RunContext(cfg=cfg, run_id=record["run_id"], ref=REF, params=RunParams()), [], [])

    assert again.status == "success" and again.counts.published == 300
    after = query(
        pg_uri, "SELECT filtered_count, produced_count FROM crawler_ops.progress WHERE task_id = %s", unique_id
    )
    assert after == before == [(300, 300)]

    # Cleared failed chunks of the run crawl more and the commit runs again: only the new counts are added.
    query(
        pg_uri,
        "UPDATE crawler_ops.crawl_run SET kept = kept + 7, published = published + 5 "
        "WHERE task_id = %s AND run_id = %s RETURNING 1",
        unique_id,
        record["run_id"],
    )
    commit_run(RunContext(cfg=cfg, run_id=record["run_id"], ref=REF, params=RunParams()), [], [])
    totals = query(
        pg_uri, "SELECT filtered_count, produced_count FROM crawler_ops.progress WHERE task_id = %s", unique_id
    )
    assert totals == [(307, 305)]


def postgres_conn(pg_uri: str, deadlock_timeout: str) -> str:
    """The crawler database as a connection whose sessions check for deadlocks after ``deadlock_timeout``."""
    url = urlsplit(pg_uri)
    return json.dumps(
        {
            "conn_type": "postgres",
            "host": url.hostname,
            "port": url.port,
            "login": url.username,
            "password": url.password,
            "schema": url.path.lstrip("/"),
            "extra": {"options": f"-c deadlock_timeout={deadlock_timeout}"},
        }
    )


def blocked_by(pg_uri: str, pids: set[int], deadline_s: float = 60) -> int:
    """Wait until a session is waiting for a lock one of ``pids`` holds; its pid."""
    deadline = time.monotonic() + deadline_s
    while True:
        waiting = query(
            pg_uri,
            "SELECT pid FROM pg_stat_activity WHERE pg_blocking_pids(pid) && %s::int[] AND NOT pid = ANY(%s::int[])",
            list(pids),
            list(pids),
        )
        if waiting:
            return int(waiting[0][0])
        assert time.monotonic() < deadline, f"nothing waited for sessions {pids}"
        time.sleep(0.05)


def test_closing_a_run_while_its_worker_finishes_a_batch_survives_the_deadlock_and_reports_once(
    source, receiver, pg_uri, unique_id, monkeypatch, use_config
):
    """The listener updates the run record, then the run's batch rows; a worker finishing a batch updates batch rows,
    then the run record. PostgreSQL breaks the deadlock by rolling one back: here, the listener's (it waits on a
    5 s deadlock timeout, the worker on 60 s), which must then close the run on a second try."""
    from crawler_ops.crawl.ledger import ledger_for
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import plan_run
    from crawler_ops.ops.listener import close_run
    from crawler_ops.planning import Batch
    from crawler_ops.results import BatchOutcome, RunCounts

    monkeypatch.setenv(f"AIRFLOW_CONN_PG_WORKER_{unique_id.upper()}", postgres_conn(pg_uri, "60s"))
    monkeypatch.setenv(f"AIRFLOW_CONN_PG_LISTENER_{unique_id.upper()}", postgres_conn(pg_uri, "5s"))
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    notify = {"conn_id": f"hook_{unique_id}"}
    worker_cfg = make_task(unique_id, notify=notify, postgres_conn_id=f"pg_worker_{unique_id}")
    use_config(make_task(unique_id, notify=notify, postgres_conn_id=f"pg_listener_{unique_id}"))
    run = RunContext(cfg=worker_cfg, run_id="dying-run", ref=REF, params=RunParams(), map_index=0)
    plan_run(run)
    ledger = ledger_for(run, "dying-run|0", "dying-run|0|1|deadbeef")
    current, following = Batch(200, 300), Batch(100, 200)
    assert ledger.claim(current) and ledger.claim(following)
    finished: list[Any] = []
    outcome = BatchOutcome(current, RunCounts(pages=1, fetched=100, kept=100, published=100, batches_done=1))
    finishing = threading.Thread(target=lambda: finished.append(ledger.finish(outcome, following)))
    closing = threading.Thread(target=close_run, args=(worker_cfg.dag_id, run.run_id, "marked failed in the UI"))

    with psycopg.connect(pg_uri) as blocker:
        blocker.execute(
            "SELECT 1 FROM crawler_ops.batch_status WHERE task_name = %s AND id = 200 FOR UPDATE", (unique_id,)
        )
        finishing.start()
        worker = blocked_by(pg_uri, {blocker.info.backend_pid})  # renewed `following`, waits for `current`
        closing.start()
        blocked_by(pg_uri, {blocker.info.backend_pid, worker})  # closed the run record, waits for a batch row
    finishing.join(120)
    closing.join(120)

    assert finished == [(0, True)], "the worker's transaction went through"
    record = run_record(pg_uri, unique_id)
    assert (record["status"], record["fetched"], record["published"]) == ("failed", 100, 100)
    assert record["errors"] == ["the DAG run failed without a commit: marked failed in the UI"]
    (request,) = receiver.requests
    assert verified(request)["summary"]["run_id"] == "dying-run"
    rows = query(
        pg_uri,
        "SELECT id, status, claim_token FROM crawler_ops.batch_status WHERE task_name = %s ORDER BY id",
        unique_id,
    )
    assert rows == [(0, 0, None), (100, 0, None), (200, 2, "dying-run|0|1|deadbeef")]
