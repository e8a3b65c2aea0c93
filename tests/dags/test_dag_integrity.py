"""The generated DAGs import cleanly with no I/O, carry the configured settings, and bad config stays visible.

Bags are read through ``bag.dags`` (``get_dag`` would ask the metadata DB), so these tests need no services.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.sdk import CronDataIntervalTimetable, TriggerRule
from airflow.sdk.exceptions import AirflowFailException

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
SAMPLE = REPO / "include" / "crawler_tasks.yaml"
SAMPLE_DAG_IDS = {
    "crawl_jobs_beijing",
    "crawl_jobs_shanghai",
    "exec_area_addresses",
    "crawler_ops_maintenance",
    "crawler_ops_gauges",
    "sample_jobs_beijing_downstream",
}


def load_bag(monkeypatch: pytest.MonkeyPatch, config: Path) -> BundleDagBag:
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    return BundleDagBag(dag_folder=str(DAGS), bundle_path=str(DAGS))


def write_config(folder: Path, document: dict[str, Any]) -> Path:
    path = folder / "tasks.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- no I/O at parse time


class ConnectionCounter:
    """Listening sockets that accept and drop every connection, counting them: a client written in C (psycopg,
    librdkafka) that connects is seen here, where patching Python's socket module would miss it."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.sockets = {}
        for name in names:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(16)
            sock.setblocking(False)
            self.sockets[name] = sock
        self.counts = dict.fromkeys(names, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def port(self, name: str) -> int:
        return int(self.sockets[name].getsockname()[1])

    def _accept_pending(self, name: str) -> None:
        while True:
            try:
                conn, _ = self.sockets[name].accept()
            except BlockingIOError:
                return
            self.counts[name] += 1
            conn.close()  # a refused handshake: the client fails fast instead of waiting for an answer

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select(list(self.sockets.values()), [], [], 0.05)
            for name, sock in self.sockets.items():
                if sock in ready:
                    self._accept_pending(name)

    def close(self) -> dict[str, int]:
        """Stop, count what is still queued in the backlog, and return the counts."""
        if self._stop.is_set():
            return self.counts
        self._stop.set()
        self._thread.join()
        for name, sock in self.sockets.items():
            self._accept_pending(name)
            sock.close()
        return self.counts


PARSE_AND_REPORT = """
import json, sys
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag

bag = BundleDagBag(dag_folder=sys.argv[1], bundle_path=sys.argv[1])
# librdkafka names its threads rdk:main, rdk:broker...: a Kafka client created at parse time shows here even
# before it connects.
threads = sorted({(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()})
print(json.dumps({"dag_ids": sorted(bag.dag_ids), "errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "threads": threads}))
"""


@pytest.fixture
def counter() -> Iterator[ConnectionCounter]:
    listeners = ConnectionCounter(("postgres", "kafka", "source", "webhook"))
    yield listeners
    listeners.close()


def test_parsing_every_dag_file_opens_no_connection_to_the_source_postgres_kafka_or_webhook(counter, tmp_path):
    document = yaml.safe_load(SAMPLE.read_text(encoding="utf-8"))
    document["tasks"][0]["notify"] = {"conn_id": "crawl_webhook"}
    config = write_config(tmp_path, document)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CRAWLER_OPS_"))}
    env = {
        **inherited,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "CRAWLER_OPS_CONFIG": str(config),
        "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]),
        "AIRFLOW_CONN_CRAWLER_DB": f"postgresql://crawler:secret@127.0.0.1:{counter.port('postgres')}/crawler",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{counter.port('kafka')}"}}
        ),
        "AIRFLOW_CONN_DEMO_SOURCE": json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": counter.port("source"), "schema": "http"}
        ),
        "AIRFLOW_CONN_CRAWL_WEBHOOK": json.dumps(
            {"conn_type": "http", "host": f"http://127.0.0.1:{counter.port('webhook')}/in", "password": "s"}
        ),
    }

    parsed = subprocess.run(
        [sys.executable, "-c", PARSE_AND_REPORT, str(DAGS)], env=env, capture_output=True, text=True, timeout=300
    )

    assert parsed.returncode == 0, parsed.stderr[-3000:]
    report = json.loads(parsed.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}
    assert set(report["dag_ids"]) == SAMPLE_DAG_IDS
    assert counter.close() == {"postgres": 0, "kafka": 0, "source": 0, "webhook": 0}
    assert not [t for t in report["threads"] if t.startswith("rdk:")], "a Kafka client was created at parse time"


def test_the_connection_counter_sees_a_connection_made_from_c(counter):
    """The guard above must be able to fail: librdkafka's connection (from C, not Python's socket) is counted."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{counter.port('kafka')}"})
    with pytest.raises(KafkaException, match=r"_TRANSPORT|_TIMED_OUT"):
        admin.list_topics(timeout=3)

    assert counter.close()["kafka"] > 0


# --------------------------------------------------------------------------- settings


def test_the_sample_config_dags_import_without_errors(monkeypatch):
    bag = load_bag(monkeypatch, SAMPLE)

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == SAMPLE_DAG_IDS


def test_each_step_of_a_crawl_dag_sees_the_dag_params_merged_with_the_run_conf(monkeypatch):
    from airflow.sdk.definitions.param import ParamValidationError, process_params
    from airflow.serialization.serialized_objects import DagSerialization

    from crawler_ops.crawl.run import RunParams

    dag = load_bag(monkeypatch, SAMPLE).dags["crawl_jobs_beijing"]
    defaults = {name: getattr(RunParams(), name) for name in RunParams.names()}
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert served.params.dump() == defaults, "the trigger form and the scheduler read the DAG's Params"
    for step in dag.tasks:
        assert not step.params, f"{step.task_id} carries no copy of the DAG's Params (serializing would resolve it)"
        assert process_params(dag, step, None, suppress_exception=False) == defaults
        with pytest.raises(ParamValidationError, match="max_batches"):
            process_params(dag, step, {"max_batches": 0}, suppress_exception=False)
    # (Airflow keeps a run's conf in the Param objects it resolved: the process of one run's task ends with it.)
    conf = {"reset": True, "max_batches": 3}
    assert process_params(dag, dag.get_task("commit"), conf, suppress_exception=False) == {**defaults, **conf}


@pytest.mark.parametrize(
    ("dag_id", "timetable"),
    [
        ("crawl_jobs_beijing", CronDataIntervalTimetable("@hourly", timezone="Asia/Shanghai")),
        ("crawl_jobs_shanghai", CronDataIntervalTimetable("0 */2 * * *", timezone="Asia/Shanghai")),
    ],
    ids=["beijing-hourly", "shanghai-every-two-hours"],
)
def test_crawl_dag_has_the_production_settings(monkeypatch, dag_id, timetable):
    dag = load_bag(monkeypatch, SAMPLE).dags[dag_id]

    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert dag.is_paused_upon_creation is False, "deploying starts crawling"
    assert dag.timetable == timetable, "cron in the users' zone; a run covers previous fire to its own"
    assert {"crawler_ops", "crawl"} <= set(dag.tags)
    assert dag.doc_md and "Params" in dag.doc_md
    assert set(dag.params.keys()) == {
        "reset",
        "dry_run",
        "max_batches",
        "filter_days",
        "replay_from",
        "replay_to",
        "skip_parked",
        "confirm_total",
    }
    assert {t.task_id for t in dag.tasks} == {"plan", "crawl_chunk", "commit", "announce"}
    for t in dag.tasks:
        assert (t.retries, t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay) == (
            2,
            timedelta(seconds=30),
            2.0,
            timedelta(minutes=30),
        ), t.task_id
        assert t.execution_timeout == timedelta(minutes=60), t.task_id
    # The steps that call the source take one slot of its pool each, whatever their concurrency (4): their requests
    # in flight take permits of their own.
    pools = {t.task_id: (t.pool, t.pool_slots) for t in dag.tasks}
    assert pools == {
        "plan": ("crawler_source_demo_source", 1),
        "crawl_chunk": ("crawler_source_demo_source", 1),
        "commit": ("default_pool", 1),
        "announce": ("default_pool", 1),
    }
    assert dag.task_dict["commit"].trigger_rule == TriggerRule.ALL_DONE
    assert dag.task_dict["crawl_chunk"].max_active_tis_per_dagrun == 4


def test_configured_retries_timeouts_pool_schedule_and_pause_reach_every_task(monkeypatch, tmp_path):
    config = write_config(
        tmp_path,
        {
            "tasks": [
                {
                    "id": "tuned",
                    "kafka": {"topic": "tuned"},
                    "schedule": "*/15 * * * *",
                    "retries": 5,
                    "retry_delay_s": 7,
                    "execution_timeout_min": 13,
                    "pool": "crawl_pool",
                    "paused": True,
                    "max_parallel_chunks": 3,
                },
                {"id": "manual", "kafka": {"topic": "manual"}, "schedule": None},
            ]
        },
    )
    bag = load_bag(monkeypatch, config)
    tuned, manual = bag.dags["crawl_tuned"], bag.dags["crawl_manual"]

    assert tuned.is_paused_upon_creation is True
    assert tuned.timetable == CronDataIntervalTimetable("*/15 * * * *", timezone="Asia/Shanghai")
    for t in tuned.tasks:
        assert (t.retries, t.retry_delay, t.execution_timeout) == (5, timedelta(seconds=7), timedelta(minutes=13))
    assert (tuned.task_dict["crawl_chunk"].pool, tuned.task_dict["crawl_chunk"].pool_slots) == ("crawl_pool", 1)
    assert tuned.task_dict["crawl_chunk"].max_active_tis_per_dagrun == 3
    assert tuned.task_dict["plan"].pool == "crawler_source_demo_source", "plan stays in the source's pool"
    assert {tuned.task_dict[t].pool for t in ("commit", "announce")} == {"default_pool"}
    assert type(manual.timetable).__name__ == "NullTimetable", "schedule: null means manual runs only"


def test_executor_and_maintenance_dags_have_their_settings(monkeypatch):
    bag = load_bag(monkeypatch, SAMPLE)
    executor, maintenance = bag.dags["exec_area_addresses"], bag.dags["crawler_ops_maintenance"]

    daily = CronDataIntervalTimetable("@daily", timezone="Asia/Shanghai")
    assert executor.timetable == daily and maintenance.timetable == daily
    assert executor.max_active_runs == maintenance.max_active_runs == 1
    assert {t.task_id for t in executor.tasks} == {"sync", "work", "summary"}
    assert executor.task_dict["summary"].trigger_rule == TriggerRule.ALL_DONE
    assert all((t.retries, t.execution_timeout) == (2, timedelta(minutes=60)) for t in executor.tasks)
    assert all((t.retries, t.execution_timeout) == (1, timedelta(minutes=60)) for t in maintenance.tasks)


def test_a_disabled_task_has_no_dag_and_no_placeholder(monkeypatch, tmp_path):
    config = write_config(
        tmp_path,
        {"tasks": [{"id": "on", "kafka": {"topic": "on"}}, {"id": "off", "kafka": {"topic": "off"}, "enabled": False}]},
    )

    bag = load_bag(monkeypatch, config)

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"crawl_on", "crawler_ops_maintenance"}


def test_only_the_dag_being_run_is_built_when_a_task_starts(monkeypatch):
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "crawl_jobs_shanghai")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "plan")

    assert set(load_bag(monkeypatch, SAMPLE).dag_ids) == {"crawl_jobs_shanghai"}


def test_a_task_process_validates_its_own_task_alone(monkeypatch, tmp_path):
    from crawler_ops.config import loading
    from crawler_ops.factory.shards import shard_of

    tasks = [{"id": f"t{i}", "kafka": {"topic": f"t{i}"}} for i in range(40)]
    config = write_config(tmp_path, {"tasks": tasks})
    validated: list[str] = []
    real = loading.validate_entry

    def counting(model, data, check_imports):
        validated.append(data.get("id"))
        return real(model, data, check_imports)

    monkeypatch.setattr(loading, "validate_entry", counting)
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "crawl_t7")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "plan")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    from crawler_ops.factory.crawl import build_crawl_dags

    shard = f"crawl_dags_{shard_of('t7', 8) + 1}_of_8.py"
    assert set(build_crawl_dags(shard_file=shard)) == {"crawl_t7"}
    assert validated == ["t7"], "the shard's other tasks were validated for a task that runs t7"


# --------------------------------------------------------------------------- bad config stays visible


def test_an_invalid_task_becomes_a_failing_dag_and_the_valid_one_still_loads(monkeypatch, tmp_path):
    config = tmp_path / "tasks.yaml"
    config.write_text(
        "tasks:\n"
        "  - id: good\n    kafka: {topic: good.topic}\n"
        "  - id: bad\n    batch_size: 0\n    kafka: {topic: bad.topic}\n",
        encoding="utf-8",
    )
    bag = load_bag(monkeypatch, config)

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"crawl_good", "crawl_bad", "crawler_ops_maintenance"}
    broken = bag.dags["crawl_bad"]
    assert "config-error" in broken.tags and broken.is_paused_upon_creation is True
    with pytest.raises(AirflowFailException, match=r"task 'bad': field 'batch_size'"):
        broken.task_dict["config_error"].python_callable()


def test_invalid_yaml_is_an_import_error_naming_the_file(monkeypatch, tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("tasks: [ {id: a, kafka: {topic: x}\n", encoding="utf-8")

    errors = load_bag(monkeypatch, config).import_errors

    assert {Path(f).name for f in errors} == {
        *(f"crawl_dags_{i}_of_8.py" for i in range(1, 9)),
        "executor_dags.py",
        "maintenance_dag.py",
        "gauges_dag.py",
        "sample_downstream.py",
    }
    assert all(f"{config} is not valid YAML" in message for message in errors.values())


def test_maintenance_dag_has_three_independent_pruning_tasks(monkeypatch):
    dag = load_bag(monkeypatch, SAMPLE).dags["crawler_ops_maintenance"]

    assert {t.task_id for t in dag.tasks} == {"prune_run_history", "prune_errors", "prune_status_rows"}
    assert all(not t.upstream_task_ids for t in dag.tasks)
    assert {"crawler_ops", "maintenance"} <= set(dag.tags)
    assert "30 days" in dag.doc_md


def test_an_invalid_maintenance_block_becomes_a_failing_dag(monkeypatch, tmp_path):
    config = tmp_path / "tasks.yaml"
    config.write_text(
        "tasks:\n  - id: good\n    kafka: {topic: good.topic}\nmaintenance: {keep_runs_days: -1}\n", encoding="utf-8"
    )
    bag = load_bag(monkeypatch, config)

    assert set(bag.dag_ids) == {"crawl_good", "crawler_ops_maintenance"}
    broken = bag.dags["crawler_ops_maintenance"]
    assert "config-error" in broken.tags
    with pytest.raises(AirflowFailException, match=r"maintenance: field 'keep_runs_days'"):
        broken.task_dict["config_error"].python_callable()


def test_crawl_dag_announces_the_topic_asset_after_the_commit(monkeypatch):
    # A connection the environment does not define (metadata DB, secrets backend) is not read while parsing.
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    dag = load_bag(monkeypatch, SAMPLE).dags["crawl_jobs_beijing"]

    announce = dag.task_dict["announce"]
    assert [o.uri for o in announce.outlets] == ["kafka://kafka_default/jobs.beijing"]
    assert announce.upstream_task_ids == {"commit"} and not dag.task_dict["commit"].outlets


def test_the_topic_asset_is_on_the_bootstrap_server_of_an_environment_connection(monkeypatch):
    servers = {"bootstrap.servers": "broker-1.test:9093,broker-2.test:9093"}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": servers}))
    dag = load_bag(monkeypatch, SAMPLE).dags["crawl_jobs_beijing"]

    assert [o.uri for o in dag.task_dict["announce"].outlets] == ["kafka://broker-1.test:9093/jobs.beijing"]


def test_every_kind_of_bad_task_becomes_a_config_error_dag_naming_task_and_field(monkeypatch, tmp_path):
    executor = {
        "source_table": "source_data_table",
        "status_table": "status_table",
        "output_fields": ["id"],
        "function": "crawler_ops.samples.full_address",
    }
    bad_tasks = {
        "bad_cron": ({"schedule": "61 * * * *"}, "schedule", "out of range"),
        "never_fires": ({"schedule": "0 0 30 2 *"}, "schedule", "never fires"),
        "seconds_cron": ({"schedule": "*/5 * * * * 30"}, "schedule", "6 fields"),
        "no_module": ({"transform": "nope.module.fn"}, "transform", "module 'nope.module'"),
        "no_submodule": ({"transform": "crawler_ops.nope.fn"}, "transform", "module 'crawler_ops.nope'"),
        "zero_batch": ({"batch_size": 0}, "batch_size", "greater than or equal to 1"),
    }
    config = write_config(
        tmp_path,
        {
            "tasks": [
                {"id": "good", "kafka": {"topic": "good.topic"}, "schedule": "0 9,18 * * *"},
                {"id": "good_weekdays", "kafka": {"topic": "good.weekdays"}, "schedule": "0 9 * * 1-5"},
                *({"id": name, "kafka": {"topic": f"{name}.topic"}, **bad} for name, (bad, _, _) in bad_tasks.items()),
            ],
            "executors": [
                {**executor, "name": "rows"},
                {**executor, "name": "no_function_module", "function": "nope.functions.fn"},
                {**executor, "name": "bad_exec_cron", "schedule": "0 25 * * *"},
            ],
        },
    )

    bag = load_bag(monkeypatch, config)

    assert bag.import_errors == {}
    good = {"crawl_good", "crawl_good_weekdays", "exec_rows", "crawler_ops_maintenance"}
    broken = {f"crawl_{name}" for name in bad_tasks} | {"exec_no_function_module", "exec_bad_exec_cron"}
    assert set(bag.dag_ids) == good | broken
    assert not any("config-error" in bag.dags[dag_id].tags for dag_id in good)
    expected = {f"crawl_{name}": (f"task '{name}'", field, text) for name, (_, field, text) in bad_tasks.items()}
    expected["exec_no_function_module"] = ("executor 'no_function_module'", "function", "module 'nope.functions'")
    expected["exec_bad_exec_cron"] = ("executor 'bad_exec_cron'", "schedule", "out of range")
    for dag_id, (who, field, text) in expected.items():
        dag = bag.dags[dag_id]
        assert "config-error" in dag.tags, dag_id
        with pytest.raises(AirflowFailException) as failure:
            dag.task_dict["config_error"].python_callable()
        message = str(failure.value)
        assert f"{config}: {who}: field '{field}'" in message and text in message, message
