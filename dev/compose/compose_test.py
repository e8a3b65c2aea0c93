"""`make compose-test`: the repo's docker-compose.yaml, unchanged, under a real Docker engine on this machine.

dev/compose/engine.sh starts the engine and builds the stand-in images; then, through the compose file alone
(its own project name, ports that leave the dev stack's alone, an env file made by include/deploy/make_env.py):

1. `up --wait` with two Celery workers: every service healthy;
2. crawl_jobs_beijing triggered through the REST API from the host, its chunks run on both workers; the topic,
   read from the host through Kafka's published listener (read_committed), equals the demo source's ground truth;
3. crawl_jobs_shanghai (exactly-once) with a worker container killed (`docker kill`) in the middle of a chunk:
   the run still succeeds and the topic holds each record of the truth exactly once;
4. `down` then `up`: the watermarks, both topics and the exactly-once markers are still there, and the next run
   fetches only what the source appended;
5. the Schema Registry (profile `registry`): a worker registers an Avro schema through the `schema_registry`
   connection airflow-init imported, reads it back by id, and the host reads the same schema by that id;
6. `down -v`: no container, volume or network of the project is left.

Each phase prints how long it took. Exit 0 when every check held; a failed check names what it saw, and the
project's logs are printed (the project is removed either way unless --keep).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "dev" / "compose" / "engine.sh"
PROJECT = os.environ.get("COMPOSE_TEST_PROJECT", "crawler-ops-compose-test")
# Host ports: none of the dev stack's (15432, 19092, 18080, 18088) nor the compose file's defaults.
PORTS = {
    "AIRFLOW_PORT": 28088,
    "KAFKA_HOST_PORT": 29094,
    "DEMO_SOURCE_PORT": 28081,
    "FLOWER_PORT": 25555,
    "SCHEMA_REGISTRY_PORT": 28085,
}
SETTINGS = {
    # Two task slots per worker: four chunks cannot all run on one worker.
    "AIRFLOW_WORKER_CONCURRENCY": "2",
    # The killed worker's task is failed and retried after 30 s without a heartbeat, not the default 5 minutes.
    "AIRFLOW_TASK_HEARTBEAT_TIMEOUT": "30",
}
BEIJING = ("jobs_beijing", "crawl_jobs_beijing", "jobs.beijing")
SHANGHAI = ("jobs_shanghai", "crawl_jobs_shanghai", "jobs.shanghai")
# beijing: 200 pages of 500, four chunks of 50 pages. shanghai: 50 pages at first; the kill test appends 125 pages
# of 200 (two chunks of about 60 pages, 1 s a page, 4 at a time: a chunk runs for 15 s or more). A total that grows
# more than tenfold would stop the run (total_jump_factor), so the first data set is not smaller.
TOTALS = {"jobs_beijing": 100_000, "jobs_shanghai": 10_000}
LATENCY_MS = {"jobs_beijing": 100, "jobs_shanghai": 1000}


def filter_days() -> dict[str, int]:
    """filter.days of each task of the sample config (the image's): the data sets lie within it, the truth uses it."""
    config = yaml.safe_load((REPO / "include" / "crawler_tasks.yaml").read_text(encoding="utf-8"))
    default = config["defaults"]["filter"]["days"]
    return {t["id"]: t.get("filter", {}).get("days", default) for t in config["tasks"]}


DAYS = filter_days()
KILL_APPENDED = 25_000
APPENDED = 300
# The data sets end 2 hours ahead: every record is in the 7-day window of any run of the next 2 hours, whatever its
# reference time (a scheduled run may come first), and appended records stay within the 24 h future tolerance.
AHEAD = timedelta(hours=2)
RUN_TIMEOUT_S = 900
TIMINGS: list[tuple[str, float]] = []


class CheckFailed(AssertionError):
    """A check of the compose test did not hold; the message says what was seen."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def log(message: str) -> None:
    print(f"{datetime.now():%H:%M:%S} compose-test: {message}", flush=True)


@contextmanager
def phase(name: str) -> Iterator[None]:
    log(f"{name} ...")
    started = time.monotonic()
    try:
        yield
    finally:
        took = time.monotonic() - started
        TIMINGS.append((name, took))
        log(f"{name}: {took:.0f} s")


class Compose:
    """`docker compose` on the repo's file with this test's project name and env file."""

    def __init__(self, env_file: Path) -> None:
        self.base = ["docker", "compose", "-p", PROJECT, "--env-file", str(env_file)]
        self.base += ["-f", str(REPO / "docker-compose.yaml"), "--profile", "demo", "--profile", "registry"]
        self.env = {k: v for k, v in os.environ.items() if k not in ("COMPOSE_FILE", "COMPOSE_PROFILES")}

    def __call__(self, *args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self.base, *args], cwd=REPO, env=self.env, text=True, capture_output=capture, check=False
        )
        if check and result.returncode != 0:
            detail = (result.stdout or "")[-3000:] + (result.stderr or "")[-3000:] if capture else ""
            raise CheckFailed(f"docker compose {' '.join(args)} exited {result.returncode}\n{detail}")
        return result

    def up(self) -> None:
        self("up", "-d", "--wait", "--wait-timeout", "600", "--scale", "airflow-worker=2")

    def psql(self, sql: str) -> str:
        """One value from the crawler database, through the postgres container's socket."""
        out = self("exec", "-T", "postgres", "psql", "-U", "crawler", "-d", "crawler", "-Atc", sql, capture=True)
        return out.stdout.strip()

    def containers(self, service: str) -> dict[str, str]:
        """The running containers of a service: hostname (what Airflow records as a task's hostname) -> id."""
        ids = self("ps", "-q", service, capture=True).stdout.split()
        found = {}
        for cid in ids:
            host = subprocess.run(
                ["docker", "inspect", "-f", "{{.Config.Hostname}}", cid], capture_output=True, text=True, check=True
            )
            found[host.stdout.strip()] = cid
        return found


class Airflow:
    """The REST API of the compose project's api-server, from the host, as the admin of .env."""

    def __init__(self, url: str, user: str, password: str) -> None:
        token = httpx.post(f"{url}/auth/token", json={"username": user, "password": password}, timeout=30)
        token.raise_for_status()
        headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
        self.http = httpx.Client(base_url=f"{url}/api/v2", timeout=30, headers=headers)

    def get(self, path: str, **params: Any) -> Any:
        answer = self.http.get(path, params=params)
        answer.raise_for_status()
        return answer.json()

    def wait_for_dags(self, dag_ids: set[str]) -> set[str]:
        deadline = time.monotonic() + 300
        while True:
            seen = {d["dag_id"] for d in self.get("/dags", limit=100)["dags"]}
            if dag_ids <= seen:
                return seen
            check(time.monotonic() < deadline, f"the dag-processor did not register {dag_ids - seen}")
            time.sleep(2)

    def pause(self, dag_id: str, paused: bool) -> None:
        self.http.patch(f"/dags/{dag_id}", json={"is_paused": paused}).raise_for_status()

    def trigger(self, dag_id: str) -> str:
        answer = self.http.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
        check(answer.status_code == 200, f"trigger {dag_id}: {answer.status_code} {answer.text}")
        return str(answer.json()["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/dags/{dag_id}/dagRuns", limit=100)["dag_runs"])

    def wait_until_idle(self, dag_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """Wait until ``run_id`` and every other run of the DAG (a scheduled one may come first) has finished."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            runs = self.runs(dag_id)
            done = all(r["state"] in ("success", "failed") for r in runs)
            done = done and (run_id is None or run_id in {r["dag_run_id"] for r in runs})
            if done:
                failed = [r["dag_run_id"] for r in runs if r["state"] != "success"]
                check(not failed, f"{dag_id}: runs failed: {failed}")
                return runs
            check(time.monotonic() < deadline, f"{dag_id}: runs not finished after {RUN_TIMEOUT_S} s: {runs}")
            time.sleep(2)

    def chunks(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        tis = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=200)["task_instances"]
        return [ti for ti in tis if ti["task_id"] == "crawl_chunk"]


class Source:
    """The demo source's admin API, through its published port."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=60)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.http.request(method, path, **kwargs)
        answer.raise_for_status()
        return answer.json()

    def create(self, task: str, ref: datetime) -> None:
        body = {
            "total": TOTALS[task],
            "ref": ref.isoformat(),
            "window_days": DAYS[task],
            "in_window_share": 1.0,
            "append_step_s": 1,
        }
        self.call("PUT", f"/admin/tasks/{task}", json=body)
        self.call("PUT", f"/admin/tasks/{task}/faults", json={"latency_ms": LATENCY_MS[task]})

    def truth(self, task: str) -> set[str]:
        """Every record a crawl now has to publish: dated within the task's days before now or up to a day ahead."""
        params = {"ref": datetime.now(UTC).isoformat(), "days": DAYS[task], "tolerance_s": 24 * 3600}
        return set(self.call("GET", f"/admin/tasks/{task}/truth", params=params)["in_window_ids"])


def read_topic(bootstrap: str, topic: str) -> list[str]:
    """The keys of every committed message of ``topic``, from the host through the published listener."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"compose-test-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        info = consumer.list_topics(topic, timeout=30).topics.get(topic)
        check(info is not None and info.error is None, f"topic {topic} is missing: {info and info.error}")
        assert info is not None
        ends = {}
        for p in info.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        keys: list[str] = []
        done: set[int] = set()
        while len(done) < len(ends):
            msg = consumer.poll(30)
            check(msg is not None, f"no message from {topic} within 30 s")
            assert msg is not None
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            keys.append(msg.key().decode())
        return keys
    finally:
        consumer.close()


def exactly(keys: list[str], truth: set[str], what: str) -> None:
    """The topic holds each record of the truth exactly once, and nothing else."""
    counts = Counter(keys)
    twice = [k for k, n in counts.items() if n > 1]
    check(set(counts) == truth, f"{what}: {len(truth - set(counts))} missing, {len(set(counts) - truth)} unexpected")
    check(not twice, f"{what}: {len(twice)} records published more than once, e.g. {twice[:3]}")


def env_file(folder: Path) -> tuple[Path, dict[str, str]]:
    path = folder / "compose-test.env"
    sets = [f"--set={k}={v}" for k, v in {**{k: str(v) for k, v in PORTS.items()}, **SETTINGS}.items()]
    subprocess.run([sys.executable, str(REPO / "include/deploy/make_env.py"), "--output", str(path), *sets], check=True)
    values = dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return path, values


def first_start(compose: Compose, source_url: str, ref: datetime) -> Source:
    """The demo source first with its data sets (a scheduled run may start as soon as Airflow is up), then the rest."""
    compose("up", "-d", "--wait", "demo-source")
    source = Source(source_url)
    for task in TOTALS:
        source.create(task, ref)
    compose.up()
    return source


def crawl_on_both_workers(compose: Compose, api: Airflow, source: Source, bootstrap: str) -> None:
    task, dag_id, topic = BEIJING
    run_id = api.trigger(dag_id)
    runs = api.wait_until_idle(dag_id, run_id)
    # A run with nothing to fetch has one skipped, unmapped crawl_chunk that ran nowhere.
    chunks = [ti for r in runs for ti in api.chunks(dag_id, r["dag_run_id"]) if ti["state"] != "skipped"]
    check(all(ti["state"] == "success" for ti in chunks), f"chunks not successful: {chunks}")
    workers = set(compose.containers("airflow-worker"))
    hosts = {ti["hostname"] for ti in chunks}
    log(f"{dag_id}: {len(runs)} run(s), {len(chunks)} chunks on {sorted(hosts)}")
    check(len(workers) == 2 and hosts == workers, f"chunks ran on {hosts}, the workers are {workers}")
    exactly(read_topic(bootstrap, topic), source.truth(task), topic)


def kill_a_worker_mid_chunk(compose: Compose, api: Airflow, source: Source, bootstrap: str) -> None:
    task, dag_id, topic = SHANGHAI
    # A scheduled run may already have crawled the first data set: new records give this run its own chunks.
    api.wait_until_idle(dag_id)
    source.call("POST", f"/admin/tasks/{task}/append", json={"n": KILL_APPENDED})
    finished = f"SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = '{task}' AND status = 2"
    before = int(compose.psql(finished) or 0)
    run_id = api.trigger(dag_id)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:  # a chunk of this run running, and a batch finished since the trigger
        running = [ti for ti in api.chunks(dag_id, run_id) if ti["state"] == "running"]
        done = int(compose.psql(finished) or 0) - before
        if running and done >= 1:
            break
        state = api.get(f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
        check(state not in ("success", "failed"), f"{dag_id} {run_id} ended ({state}) before a chunk could be killed")
        check(time.monotonic() < deadline, f"{dag_id}: no chunk ran")
        time.sleep(0.5)
    victim = running[0]["hostname"]
    workers = compose.containers("airflow-worker")
    check(victim in workers, f"chunk on {victim}, workers {workers}")
    log(f"docker kill {victim} (chunk {running[0]['map_index']}, {done} batches done)")
    subprocess.run(["docker", "kill", workers[victim]], check=True, capture_output=True)
    api.wait_until_idle(dag_id, run_id)
    # The killed chunk was failed for its lost heartbeat and retried on the worker that is left.
    [retried] = [ti for ti in api.chunks(dag_id, run_id) if ti["map_index"] == running[0]["map_index"]]
    check(retried["try_number"] >= 2 and retried["hostname"] != victim, f"the killed chunk was not retried: {retried}")
    exactly(read_topic(bootstrap, topic), source.truth(task), f"{topic} after the kill")


def durable_state(compose: Compose, bootstrap: str) -> dict[str, Any]:
    """What must survive `down`/`up`: watermarks, both topics, the exactly-once marker topic."""
    return {
        "watermarks": compose.psql(
            "SELECT string_agg(task_id || '=' || watermark, ',' ORDER BY task_id) FROM crawler_ops.progress"
        ),
        "beijing": sorted(read_topic(bootstrap, BEIJING[2])),
        "shanghai": sorted(read_topic(bootstrap, SHANGHAI[2])),
        "markers": len(read_topic(bootstrap, f"crawler_ops.batches.{SHANGHAI[0]}")),
    }


def incremental_run(compose: Compose, api: Airflow, source: Source, bootstrap: str, before: list[str]) -> None:
    task, dag_id, topic = BEIJING
    api.wait_until_idle(dag_id)
    watermark = int(compose.psql(f"SELECT watermark FROM crawler_ops.progress WHERE task_id = '{task}'"))
    since = compose.psql("SELECT now()")
    source.call("POST", f"/admin/tasks/{task}/append", json={"n": APPENDED})
    run_id = api.trigger(dag_id)
    api.wait_until_idle(dag_id, run_id)
    # The triggered run, and a scheduled one if an hour began meanwhile: the first starts at the stored watermark,
    # together they publish the appended records and nothing else.
    rows = compose.psql(
        f"SELECT string_agg(old_watermark || ':' || fetched || ':' || published, ',' ORDER BY started_at) "
        f"FROM crawler_ops.crawl_run WHERE task_id = '{task}' AND started_at > '{since}'"
    )
    runs = [tuple(int(x) for x in row.split(":")) for row in rows.split(",")]
    log(f"runs after the restart (old watermark, fetched, published): {runs}")
    check(runs[0][0] == watermark, f"the first run started from watermark {runs[0][0]}, the stored one was {watermark}")
    fetched, published = sum(r[1] for r in runs), sum(r[2] for r in runs)
    check(published == APPENDED and fetched < 2 * APPENDED + 1000, f"fetched {fetched}, published {published}")
    keys = read_topic(bootstrap, topic)
    check(len(keys) == len(before) + APPENDED, f"{topic}: {len(before)} before, {len(keys)} after")
    exactly(keys, source.truth(task), f"{topic} after the incremental run")


# Run in a worker container: the schema_registry connection as a task would get it (from the metadata database,
# where airflow-init imported it), one Avro schema registered and read back; prints the id the registry gave.
REGISTRY_CHECK = """
import json
from crawler_ops.hooks.kafka.registry import SchemaRegistryHook
schema = {"type": "record", "name": "probe", "namespace": "compose_test",
          "fields": [{"name": "aae397", "type": "string"}, {"name": "n", "type": ["null", "long"], "default": None}]}
hook = SchemaRegistryHook()
schema_id = hook.register("compose-test-probe-value", schema, "AVRO")
assert hook.schema(schema_id) == schema, hook.schema(schema_id)
latest = hook.latest("compose-test-probe-value")
assert latest is not None and latest.id == schema_id, latest
print(json.dumps({"id": schema_id, "version": latest.version}))
"""


def schema_registry(compose: Compose, registry_url: str) -> None:
    # A process of Airflow's own (not a task's) reads connections from the metadata database when told it is one.
    server = ["-e", "_AIRFLOW_PROCESS_CONTEXT=server"]
    out = compose("exec", "-T", *server, "airflow-worker", "python", "-c", REGISTRY_CHECK, capture=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    log(f"a worker registered schema id {answer['id']} (version {answer['version']}) through schema_registry")
    read = httpx.get(f"{registry_url}/schemas/ids/{answer['id']}", timeout=10)
    check(read.status_code == 200, f"the host could not read schema id {answer['id']}: {read.status_code} {read.text}")
    check(json.loads(read.json()["schema"])["name"] == "probe", f"schema id {answer['id']} is {read.text}")


def leftovers() -> list[str]:
    label = f"label=com.docker.compose.project={PROJECT}"
    found = []
    for kind in (["ps", "-a", "-q"], ["volume", "ls", "-q"], ["network", "ls", "-q"]):
        out = subprocess.run(["docker", *kind, "--filter", label], capture_output=True, text=True, check=True)
        found += [f"{kind[0]} {x}" for x in out.stdout.split()]
    return found


def docker_host(no_engine: bool, given: str | None) -> str:
    """The engine the test talks to: with ``--no-engine``, the one ``DOCKER_HOST`` names when it is set (an engine of
    the user's own); otherwise the one ``engine.sh`` runs."""
    if no_engine and given:
        return given
    out = subprocess.run(["bash", str(ENGINE), "env"], capture_output=True, text=True, check=True).stdout
    return out.split("=", 1)[1].strip()


def run(args: argparse.Namespace, folder: Path) -> None:
    if not args.no_engine:
        with phase("engine and stand-in images (dev/compose/engine.sh up)"):
            subprocess.run(["bash", str(ENGINE), "up"], check=True)
    os.environ["DOCKER_HOST"] = docker_host(args.no_engine, os.environ.get("DOCKER_HOST"))
    path, values = env_file(folder)
    compose = Compose(path)
    bootstrap = f"127.0.0.1:{PORTS['KAFKA_HOST_PORT']}"
    source_url = f"http://127.0.0.1:{PORTS['DEMO_SOURCE_PORT']}"
    airflow_url = f"http://127.0.0.1:{PORTS['AIRFLOW_PORT']}"
    registry_url = f"http://127.0.0.1:{PORTS['SCHEMA_REGISTRY_PORT']}/apis/ccompat/v6"
    with phase("clean (down -v of an earlier run)"):
        compose("down", "-v", "--remove-orphans")
    with phase("compose build (the Airflow image once, the demo source)"):
        compose("build")
    ref = (datetime.now(UTC) + AHEAD).replace(microsecond=0)
    with phase("up --wait (every service healthy, two workers)"):
        source = first_start(compose, source_url, ref)
        api = Airflow(airflow_url, values["AIRFLOW_ADMIN_USER"], values["AIRFLOW_ADMIN_PASSWORD"])
        for dag_id in api.wait_for_dags({BEIJING[1], SHANGHAI[1]}):
            api.pause(dag_id, dag_id not in (BEIJING[1], SHANGHAI[1]))  # the others only add noise here
    with phase("crawl_jobs_beijing on both workers, topic read from the host = ground truth"):
        crawl_on_both_workers(compose, api, source, bootstrap)
    with phase("crawl_jobs_shanghai (exactly-once) with a worker killed mid-chunk"):
        kill_a_worker_mid_chunk(compose, api, source, bootstrap)
    with phase("down, up: watermarks, topics and markers kept"):
        before = durable_state(compose, bootstrap)
        check(before["markers"] > 0, "no exactly-once markers were written")
        compose("down")
        first_start(compose, source_url, ref)
        api = Airflow(airflow_url, values["AIRFLOW_ADMIN_USER"], values["AIRFLOW_ADMIN_PASSWORD"])
        after = durable_state(compose, bootstrap)
        for name in before:
            check(before[name] == after[name], f"{name} changed across down/up")
    with phase("incremental run after the restart"):
        incremental_run(compose, api, source, bootstrap, before["beijing"])
    with phase("schema registry through the schema_registry connection, from a worker"):
        schema_registry(compose, registry_url)
    with phase("down -v"):
        compose("down", "-v", "--remove-orphans")
        left = leftovers()
        check(not left, f"down -v left {left}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--no-engine",
        action="store_true",
        help="the engine and images are ready: skip engine.sh (an engine DOCKER_HOST names is used as it is)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the project running when a check fails")
    args = parser.parse_args(argv)
    started = time.monotonic()
    failed: BaseException | None = None
    with tempfile.TemporaryDirectory(prefix="compose-test-") as folder:
        try:
            run(args, Path(folder))
        except (CheckFailed, subprocess.CalledProcessError, httpx.HTTPError, KafkaException) as exc:
            failed = exc
            compose = Compose(Path(folder) / "compose-test.env")
            compose("ps", "-a", check=False)
            compose("logs", "--tail", "60", check=False)
            if not args.keep:
                compose("down", "-v", "--remove-orphans", check=False)
    print("\ncompose-test phases:")
    for name, took in TIMINGS:
        print(f"  {took:7.0f} s  {name}")
    print(f"  {time.monotonic() - started:7.0f} s  total")
    if failed is not None:
        print(f"compose-test: FAILED: {failed}", file=sys.stderr)
        return 1
    print("compose-test: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
