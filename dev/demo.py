"""`make demo`: run the sample crawl DAG once with `airflow dags test` and show what reached Kafka and PostgreSQL.

Run after `dev/stack.py up`. A second run is incremental: the demo source first gets 300 new postings
appended (as a live source would), and only those are fetched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
from confluent_kafka import Consumer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
STACK = Path(os.environ.get("CRAWLER_OPS_STACK_DIR", REPO / ".stack"))
TASK, TOPIC, SOURCE_TASK = "jobs_beijing", "jobs.beijing", "jobs_beijing"


def topic_size(bootstrap: str) -> tuple[int, dict | None]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crawler-ops-demo", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(TOPIC, timeout=10)
        if TOPIC not in metadata.topics or metadata.topics[TOPIC].error is not None:
            return 0, None
        count, sample = 0, None
        for p in metadata.topics[TOPIC].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            count += high - low
            if sample is None and high > low:
                consumer.assign([TopicPartition(TOPIC, p, high - 1)])
                msg = consumer.poll(10)
                if msg is not None and not msg.error():
                    sample = {
                        "key": msg.key().decode(),
                        "headers": dict((k, v.decode()) for k, v in msg.headers()),
                        "value": json.loads(msg.value()),
                    }
        return count, sample
    finally:
        consumer.close()


def main() -> int:
    env = {**os.environ, **json.loads((STACK / "stack.json").read_text())["env"]}
    pg_uri = env["CRAWLER_OPS_PG_URI"]
    with psycopg.connect(pg_uri) as conn:
        exists = conn.execute("SELECT to_regclass('crawler_ops.progress')").fetchone()[0]
        watermark = (
            exists and conn.execute("SELECT watermark FROM crawler_ops.progress WHERE task_id = %s", (TASK,)).fetchone()
        )
    if watermark:
        total = httpx.post(
            f"{env['CRAWLER_OPS_SOURCE_URL']}/admin/tasks/{SOURCE_TASK}/append",
            json={"n": 300},
            headers={"Authorization": f"Bearer {env['CRAWLER_OPS_SOURCE_ADMIN_TOKEN']}"},
        )
        print(f"demo: watermark is {watermark[0]}; the source got 300 new postings (total {total.json()['total']})")
    log = STACK / "logs" / "demo-dags-test.log"
    print(f"demo: airflow dags test crawl_{TASK}  (full log: {log})")
    with log.open("w") as out:
        result = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "dags", "test", f"crawl_{TASK}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    with psycopg.connect(pg_uri) as conn:
        run = conn.execute(
            "SELECT run_id, mode, status, total, old_watermark, new_watermark, pages, fetched, kept, published, "
            "expired, dead_lettered FROM crawler_ops.crawl_run WHERE task_id = %s ORDER BY started_at DESC LIMIT 1",
            (TASK,),
        ).fetchone()
        progress = conn.execute(
            "SELECT watermark, total, status, filtered_count, produced_count, updated_at "
            "FROM crawler_ops.progress WHERE task_id = %s",
            (TASK,),
        ).fetchone()
    count, sample = topic_size(env["CRAWLER_OPS_KAFKA_BOOTSTRAP"])
    print("\n== PostgreSQL crawler_ops.crawl_run (latest run) ==")
    names = (
        "run_id",
        "mode",
        "status",
        "total",
        "old_watermark",
        "new_watermark",
        "pages",
        "fetched",
        "kept",
        "published",
        "expired",
        "dead_lettered",
    )
    for name, value in zip(names, run or (), strict=False):
        print(f"  {name:14s} {value}")
    print("== PostgreSQL crawler_ops.progress ==")
    for name, value in zip(
        ("watermark", "total", "status", "filtered", "produced", "updated_at"), progress or (), strict=False
    ):
        print(f"  {name:14s} {value}")
    print(f"== Kafka topic {TOPIC}: {count} messages; newest: ==")
    if sample:
        value = sample["value"]
        short = {k: (v[:40] + "...") if isinstance(v, str) and len(v) > 40 else v for k, v in value.items()}
        print(
            json.dumps(
                {"key": sample["key"], "headers": sample["headers"], "value": short}, ensure_ascii=False, indent=2
            )
        )
    if result.returncode != 0:
        print(f"demo: the DAG run failed (exit {result.returncode}); see {log}", file=sys.stderr)
    else:
        print("\nPer-task status (source total, watermark, runs, errors, Kafka lag): make status")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
