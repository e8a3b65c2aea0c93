"""Helpers for integration tests: drive the demo source, read Kafka, query PostgreSQL, run crawl DAGs."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import psycopg
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from crawler_ops.config import CrawlTaskConfig, ExecutorTaskConfig
from crawler_ops.planning import ChunkPlan

SOURCE_ADMIN_TOKEN_ENV = "CRAWLER_OPS_SOURCE_ADMIN_TOKEN"


def source_admin_headers(token: str | None = None) -> dict[str, str]:
    """The header the demo source's admin API wants: ``token``, else the stack's (its env, from ``stack.json``)."""
    token = token or os.environ.get(SOURCE_ADMIN_TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


class DemoSource:
    """Admin client of the demo source API (dev/demo_source).

    :param base_url: the source's URL.
    :param token: its admin token (default: ``CRAWLER_OPS_SOURCE_ADMIN_TOKEN``, which the stack's env sets).
    """

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30, headers=source_admin_headers(token))

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

    def requests_seen(self, task: str) -> dict[str, int]:
        """The count and page requests the source answered for ``task`` since its log was cleared."""
        counters = self._json("GET", f"/admin/tasks/{task}")["requests"]
        return {"count": counters.get("count", 0), "list": counters.get("list", 0)}

    def clear_requests(self, task: str) -> None:
        self._json("DELETE", f"/admin/tasks/{task}/requests")

    def records(self, task: str, offset: int, limit: int) -> list[dict[str, Any]]:
        """Records ``[offset, offset + limit)`` as the source serves them (logged like any page request)."""
        return list(self._json("GET", f"/api/{task}/list", params={"offset": offset, "limit": limit})["data"]["data"])

    def truth(self, task: str, ref: datetime, days: float, tolerance_s: int = 0) -> dict[str, Any]:
        return self._json(
            "GET",
            f"/admin/tasks/{task}/truth",
            params={"ref": ref.isoformat(), "days": days, "tolerance_s": tolerance_s},
        )

    def ids_since(self, task: str, start: datetime) -> set[str]:
        """The ground truth of the records dated at or after ``start`` (up to ten years later)."""
        return set(self.truth(task, start, days=0, tolerance_s=10 * 365 * 86_400)["in_window_ids"])

    def ids_between(self, task: str, start: datetime, end: datetime) -> set[str]:
        """The ground truth of the records dated in the half-open interval ``[start, end)``: the closed interval's
        truth without the records dated exactly at ``end`` (whole seconds both, so nothing is rounded)."""
        closed = self.truth(task, start, days=0, tolerance_s=int((end - start).total_seconds()))["in_window_ids"]
        at_end = self.truth(task, end, days=0, tolerance_s=0)["in_window_ids"]
        return set(closed) - set(at_end)

    def in_flight(self, task: str) -> dict[str, int]:
        """The data set's requests (count and list) being answered now and the most that were at once since it was
        created or its request log cleared: ``{"in_flight": n, "peak": most}``."""
        return dict(self._json("GET", f"/admin/tasks/{task}/in_flight"))


@dataclass(frozen=True)
class Delivered:
    key: str
    value: Any  # the decoded value: a JSON object unless read_topic was given another decode
    headers: dict[str, str]
    partition: int = -1
    timestamp: int = -1  # milliseconds since the epoch
    timestamp_type: int = -1  # confluent_kafka.TIMESTAMP_CREATE_TIME or TIMESTAMP_LOG_APPEND_TIME


class MissingTopic(AssertionError):
    """The topic a test reads does not exist: a misnamed topic must not pass for an empty one."""


def topic_exists(bootstrap: str, topic: str, timeout: float = 20.0) -> bool:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}"})
    try:
        info = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        return info is not None and info.error is None and bool(info.partitions)
    finally:
        consumer.close()


def routed_topics(bootstrap: str, prefix: str) -> list[str]:
    """The topics whose names start with ``prefix`` (those a topic_template routed records to)."""
    from confluent_kafka.admin import AdminClient

    names = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return sorted(name for name in names if name.startswith(prefix))


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    """Create ``topic`` (for tests that check that a run published nothing to it)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_topic(
    bootstrap: str,
    topic: str,
    timeout: float = 20.0,
    isolation: str = "read_committed",
    decode: Callable[[bytes], Any] = json.loads,
) -> list[Delivered]:
    """Every message in ``topic`` from the beginning to the current end of each partition; ``isolation``
    ``read_uncommitted`` also returns records of aborted or open Kafka transactions; ``decode`` reads each value
    (bytes: the value as it is).

    :raises MissingTopic: when the topic does not exist (an empty list always means "exists and is empty").
    """
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
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise MissingTopic(f"Kafka topic {topic!r} does not exist ({info.error if info else 'not listed'})")
        ends = {}
        for p in info.partitions:
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
                    msg.key().decode(),
                    decode(msg.value()),
                    {k: v.decode() for k, v in (msg.headers() or [])},
                    msg.partition(),
                    msg.timestamp()[1],
                    msg.timestamp()[0],
                )
            )
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return messages
    finally:
        consumer.close()


REPO = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m crawler_ops ARGS`` in its own process, with this checkout's plugins, as an operator runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "crawler_ops", *args], env=env, capture_output=True, text=True, timeout=120
    )


def spawn_runner(script: str, spec: dict[str, Any], **env: str) -> subprocess.Popen[str]:
    """Run ``tests/integration/<script>`` with ``spec`` in its own process, as an Airflow task process would, so a
    test can run several at once or SIGKILL one; its result is the last line of its stdout."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "integration" / script), json.dumps(spec)],
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])},
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


def spawn_chunk(
    cfg: CrawlTaskConfig,
    run_id: str,
    ref: datetime,
    chunk: ChunkPlan,
    try_number: int = 1,
    kill: dict[str, Any] | None = None,
) -> subprocess.Popen[str]:
    """Run one planned chunk in a child process (``tests/integration/chunk_runner.py``), as an Airflow task
    process would, so a test can kill it; ``kill`` makes it SIGKILL itself at a chosen point (see the runner)."""
    return spawn_runner("chunk_runner.py", chunk_spec(cfg, run_id, ref, chunk, try_number, kill=kill))


def chunk_spec(
    cfg: CrawlTaskConfig, run_id: str, ref: datetime, chunk: ChunkPlan, try_number: int = 1, **extra: Any
) -> dict[str, Any]:
    """What a chunk runner process (``chunk_runner.py``, ``pause_runner.py``) is given: the chunk of a run, as the
    first mapped task instance's try ``try_number``, plus the runner's own ``extra`` keys (kill, pause, ...)."""
    spec = {
        "config": cfg.model_dump(mode="json"),
        "run_id": run_id,
        "ref": ref.isoformat(),
        "map_index": 0,
        "try_number": try_number,
        "payload": chunk.to_xcom(),
    }
    return {**spec, **extra}


def runner_result(process: subprocess.Popen[str], timeout: float = 300) -> dict[str, Any]:
    out = process.communicate(timeout=timeout)[0]
    assert process.returncode == 0, f"the runner failed (exit {process.returncode}); see its stderr above"
    return dict(json.loads(out.strip().splitlines()[-1]))


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
        # The demo source is local: a generous shared rate (the limiter still runs), no bound on requests in flight
        # (default_pool, as in every test written before per-source pools), quick recovery after a test's 429s.
        "source": {
            "backoff_s": 0.05,
            "max_backoff_s": 0.2,
            "max_retries": 2,
            "requests_per_s": 1000,
            "max_in_flight": None,
            "rate_recovery_s": 2,
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return CrawlTaskConfig.model_validate(base)


def write_config(cfg: CrawlTaskConfig | ExecutorTaskConfig, folder: Path, section: str = "tasks") -> Path:
    """Write ``cfg`` as the only entry of a YAML config section (the ``use_config`` fixture points
    $CRAWLER_OPS_CONFIG at it)."""
    path = folder / f"{cfg.dag_id}.yaml"
    entry = cfg.model_dump(mode="json")  # None kept: schedule null must stay null
    path.write_text(yaml.safe_dump({section: [entry]}, allow_unicode=True))
    return path


def done_batches(pg_uri: str, task_id: str) -> dict[int, int]:
    """The task's status rows marked done: batch start offset -> end."""
    return dict(
        query(pg_uri, "SELECT id, hi FROM crawler_ops.batch_status WHERE task_name = %s AND status = 2", task_id)
    )


def duplicated_offsets(messages: list[Delivered]) -> list[int]:
    """Source offsets of the messages whose key was published more than once, sorted, each once."""
    repeated = duplicates(messages)
    return sorted({int(m.headers["source_offset"]) for m in messages if m.key in repeated})


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
    from crawler_ops.telemetry.webhook import verify

    verify(secret, request["headers"], request["body"])
    return json.loads(request["body"])


@dataclass(frozen=True)
class Forwarded:
    """One request that went through a :class:`SourceProxy`: when it arrived and was answered, and how."""

    path: str
    params: dict[str, str]
    status: int
    arrived: float  # time.monotonic()
    answered: float

    @property
    def page(self) -> tuple[int, int] | None:
        """(offset, limit) of a page request."""
        if "offset" not in self.params:
            return None
        return int(self.params["offset"]), int(self.params.get("limit", 100))


class SourceProxy:
    """An HTTP proxy on loopback in front of the demo source, as the crawl's source connection.

    It records when each request arrived and was answered (the demo source's own log has no times), and it
    can hold requests (``hold``) until the test releases them, so a test can stop a crawl at an exact page
    or make two workers overlap for certain instead of hoping they do. ``rewrite(path, params, body)``, when
    set, returns the body to send instead of the demo source's (a hostile source built on real data).
    """

    def __init__(self, upstream: str, conn_id: str = "source_proxy") -> None:
        self.conn_id = conn_id
        self.upstream = httpx.Client(base_url=upstream, timeout=120)
        self.log: list[Forwarded] = []
        self._lock = threading.Condition()
        self._holding: Any = None
        self._held = 0
        self._open = threading.Event()
        self._open.set()
        self.rewrite: Any = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                arrived = time.monotonic()
                path, _, query = self.path.partition("?")
                params = dict(parse_qsl(query))
                proxy._wait_if_held(path, params)
                upstream = proxy.upstream.get(path, params=params)
                body = upstream.content if proxy.rewrite is None else proxy.rewrite(path, params, upstream.content)
                self.send_response(upstream.status_code)
                for name in ("content-type", "retry-after"):
                    if name in upstream.headers:
                        self.send_header(name, upstream.headers[name])
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                with proxy._lock:
                    proxy.log.append(Forwarded(path, params, upstream.status_code, arrived, time.monotonic()))

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A held request whose client was killed meanwhile fails to answer it: that is expected, not news.
        self.server.handle_error = lambda *_args: None  # type: ignore[method-assign]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def connection(self) -> str:
        """The value of an ``AIRFLOW_CONN_<ID>`` variable that makes a connection point at this proxy."""
        return json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": self.port, "schema": "http"})

    def hold(self, predicate: Any) -> None:
        """From now on, requests for which ``predicate(path, params)`` is true wait until :meth:`release`."""
        with self._lock:
            self._holding = predicate
            self._held = 0
            self._open.clear()

    def _wait_if_held(self, path: str, params: dict[str, str]) -> None:
        with self._lock:
            if self._holding is None or not self._holding(path, params):
                return
            self._held += 1
            self._lock.notify_all()
        self._open.wait()

    def wait_held(self, count: int, timeout: float = 120.0) -> None:
        """Wait until ``count`` requests are being held."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._held >= count, timeout):
                raise TimeoutError(f"{self._held} requests held after {timeout}s, expected {count}")

    def release(self) -> None:
        """Let held requests (and later ones) through."""
        with self._lock:
            self._holding = None
        self._open.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self.upstream.close()


def loopback(ip: str) -> bool:
    """Whether a listening address is a loopback one (IPv4, IPv6, or IPv4 mapped into IPv6)."""
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)  # Java listens on ::ffff:127.0.0.1
    return (mapped or address).is_loopback


class StatsdCollector:
    """A StatsD server on loopback UDP: keeps every metric line Airflow sends (point ``[metrics] statsd_host`` and
    ``statsd_port`` at it)."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            data = self.socket.recv(65_536)
            self.lines.extend(data.decode(errors="replace").splitlines())

    def counter(self, name: str) -> int:
        """Sum of a counter's increments (``name:<n>|c``)."""
        total = 0
        for line in list(self.lines):
            metric, _, rest = line.partition(":")
            if metric == name and rest.endswith("|c"):
                total += int(rest.split("|")[0])
        return total

    def gauges(self) -> dict[str, float]:
        """The last value of every gauge received (``name:<value>|g``; no deltas are sent here)."""
        found = {}
        for line in list(self.lines):
            metric, _, rest = line.partition(":")
            if rest.endswith("|g"):
                found[metric] = float(rest.split("|")[0])
        return found

    def wait_for_gauge(self, name: str, timeout: float = 10.0) -> float:
        """A gauge's last value, waiting for its datagram (UDP arrives after the sender returned)."""
        deadline = time.monotonic() + timeout
        while (value := self.gauges().get(name)) is None:
            assert time.monotonic() < deadline, f"no gauge {name} within {timeout}s; got {sorted(self.gauges())}"
            time.sleep(0.05)
        return value
