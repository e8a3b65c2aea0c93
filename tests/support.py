"""Helpers for integration tests: drive the demo source, read Kafka, query PostgreSQL, run crawl DAGs."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from crawler_ops.config import CrawlTaskConfig, ExecutorTaskConfig


class DemoSource:
    """Admin client of the demo source API (dev/demo_source)."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def create(self, task: str, total: int, ref: datetime, **config: Any) -> dict[str, Any]:
        return self._json("PUT", f"/admin/tasks/{task}", json={"total": total, "ref": ref.isoformat(), **config})

    def faults(self, task: str, **faults: Any) -> None:
        self._json("PUT", f"/admin/tasks/{task}/faults", json=faults)

    def clear_faults(self, task: str) -> None:
        self._json("DELETE", f"/admin/tasks/{task}/faults")

    def append(self, task: str, n: int) -> int:
        return int(self._json("POST", f"/admin/tasks/{task}/append", json={"n": n})["total"])

    def truncate(self, task: str, total: int) -> None:
        self._json("POST", f"/admin/tasks/{task}/truncate", json={"total": total})

    def page_requests(self, task: str) -> list[dict[str, Any]]:
        """List requests since the last clear, excluding one-record window probes."""
        return [r for r in self._json("GET", f"/admin/tasks/{task}/requests")["requests"] if r["limit"] != 1]

    def clear_requests(self, task: str) -> None:
        self._json("DELETE", f"/admin/tasks/{task}/requests")

    def truth(self, task: str, ref: datetime, days: float, tolerance_s: int = 0) -> dict[str, Any]:
        return self._json(
            "GET",
            f"/admin/tasks/{task}/truth",
            params={"ref": ref.isoformat(), "days": days, "tolerance_s": tolerance_s},
        )


@dataclass(frozen=True)
class Delivered:
    key: str
    value: dict[str, Any]
    headers: dict[str, str]


def read_topic(bootstrap: str, topic: str, timeout: float = 20.0, isolation: str = "read_committed") -> list[Delivered]:
    """Every message in ``topic`` from the beginning to the current end of each partition; ``isolation``
    ``read_uncommitted`` also returns records of aborted or open Kafka transactions."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = metadata.topics[topic].partitions if topic in metadata.topics else {}
        if not partitions or metadata.topics[topic].error is not None:
            return []
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        messages: list[Delivered] = []
        done: set[int] = set()
        while len(done) < len(ends):
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no message from {topic} within {timeout}s")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            messages.append(
                Delivered(
                    msg.key().decode(), json.loads(msg.value()), {k: v.decode() for k, v in (msg.headers() or [])}
                )
            )
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return messages
    finally:
        consumer.close()


def duplicates(messages: list[Delivered]) -> Counter[str]:
    counts = Counter(m.key for m in messages)
    return Counter({k: n for k, n in counts.items() if n > 1})


def query(pg_uri: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_uri) as conn:
        return conn.execute(statement, params).fetchall()


def watermark(pg_uri: str, task_id: str) -> int | None:
    rows = query(pg_uri, "SELECT watermark FROM crawler_ops.progress WHERE task_id = %s", task_id)
    return rows[0][0] if rows else None


def run_record(pg_uri: str, task_id: str) -> dict[str, Any]:
    """The newest run record of a task as a dict."""
    with psycopg.connect(pg_uri) as conn:
        cur = conn.execute(
            "SELECT * FROM crawler_ops.crawl_run WHERE task_id = %s ORDER BY started_at DESC LIMIT 1", (task_id,)
        )
        row = cur.fetchone()
        assert row is not None, f"no run record for {task_id}"
        return dict(zip([d.name for d in cur.description or ()], row, strict=True))


def make_task(task_id: str, **overrides: Any) -> CrawlTaskConfig:
    """A crawl task on the demo source with a unique topic; fast retries for tests."""
    base: dict[str, Any] = {
        "id": task_id,
        "kafka": {"topic": f"test.{task_id}", "partitions": 2},
        "batch_size": 100,
        "schedule": None,
        "retries": 0,
        "retry_delay_s": 0,
        "min_batches_per_chunk": 5,
        "max_chunks": 4,
        "source": {"backoff_s": 0.05, "max_backoff_s": 0.2, "max_retries": 2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return CrawlTaskConfig.model_validate(base)


def use_config(cfg: CrawlTaskConfig | ExecutorTaskConfig, folder: Path, section: str = "tasks") -> Path:
    """Write ``cfg`` as the only entry of a YAML config section and point $CRAWLER_OPS_CONFIG at it."""
    path = folder / f"{cfg.dag_id}.yaml"
    entry = cfg.model_dump(mode="json")  # None kept: schedule null must stay null
    path.write_text(yaml.safe_dump({section: [entry]}, allow_unicode=True))
    os.environ["CRAWLER_OPS_CONFIG"] = str(path)
    return path


def run_dag(cfg: CrawlTaskConfig, ref: datetime, conf: dict[str, Any] | None = None) -> str:
    """Run the task's crawl DAG once in-process with ``dag.test()``; returns the DagRun state.

    ``dag.test()`` serialises the DAGs of the dags folder, so the task is written to a config file that
    the folder's DAG file reads; the tasks then run in this process.
    """
    from crawler_ops.factory import build_crawl_dag

    use_config(cfg, Path(tempfile.mkdtemp(prefix="crawler-ops-test-")))
    dagrun = build_crawl_dag(cfg).test(logical_date=ref, run_conf=conf or {})
    return str(dagrun.state)


class Receiver:
    """A webhook receiver on loopback: records each request; answers with ``status``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"headers": dict(self.headers), "body": body, "path": self.path})
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/crawl"


def verified(request: dict[str, Any], secret: str = "s3cret-秘密") -> dict[str, Any]:
    """The JSON body, after checking the signature as a receiver would."""
    timestamp = request["headers"]["X-Crawler-Ops-Timestamp"]
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + request["body"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request["headers"]["X-Crawler-Ops-Signature"], f"sha256={expected}")
    return json.loads(request["body"])


def spawn_chunk(
    cfg: CrawlTaskConfig,
    run_id: str,
    ref: datetime,
    chunk: dict[str, Any],
    try_number: int = 1,
    kill: dict[str, Any] | None = None,
) -> subprocess.Popen[str]:
    """Run one planned chunk in a child process (``tests/integration/chunk_runner.py``), as an Airflow task
    process would, so a test can kill it; ``kill`` makes it SIGKILL itself at a chosen point (see the runner)."""
    spec = {
        "config": cfg.model_dump(mode="json"),
        "run_id": run_id,
        "ref": ref.isoformat(),
        "map_index": 0,
        "try_number": try_number,
        "payload": chunk,
        "kill": kill,
    }
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "plugins"), str(repo)])}
    runner = str(repo / "tests" / "integration" / "chunk_runner.py")
    return subprocess.Popen(
        [sys.executable, runner, json.dumps(spec)], env=env, cwd=repo, stdout=subprocess.PIPE, text=True
    )


def chunk_result(worker: subprocess.Popen[str], timeout: float = 300) -> dict[str, Any]:
    """Wait for a chunk process; its result (the last line it printed), failing the test if it failed."""
    out, _ = worker.communicate(timeout=timeout)
    assert worker.returncode == 0, f"the chunk failed (exit {worker.returncode})"
    return json.loads(out.strip().splitlines()[-1])
