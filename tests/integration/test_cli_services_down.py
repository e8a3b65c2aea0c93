"""`crawler-ops` with PostgreSQL, Kafka or Airflow's metadata database down: every command that needs the service
says which one does not answer and what to do, exits 2, and prints no traceback. A service is down for real: its
connection points at a local port nothing listens on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.integration

# The commands that touch a service, against the stack's config (crawl task jobs_beijing, executor area_addresses).
POSTGRES_COMMANDS = [
    ["status"],
    ["status", "--no-live", "--json"],
    ["status", "--task", "jobs_beijing", "--no-live"],
    ["status", "--executor", "area_addresses", "--no-live"],
    ["skip-batch", "--task", "jobs_beijing", "--offset", "0"],
    ["unpark", "--executor", "area_addresses"],
    ["unpark", "--executor", "area_addresses", "--id", "1", "2"],
    ["import-progress", "{positions}"],
    ["import-progress", "{positions}", "--apply"],
    ["check", "--task", "jobs_beijing"],  # the source's rate limit is shared through PostgreSQL
]
KAFKA_COMMANDS = [["status"], ["status", "--task", "jobs_beijing"], ["status", "--json"]]
METADATA_DB_COMMANDS = [["pools", "--apply"]]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound once to pick it, then closed: connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_cli(args: list[str], positions: Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = [arg.replace("{positions}", str(positions)) for arg in args]
    return subprocess.run(
        [sys.executable, "-m", "crawler_ops", *command],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def positions(tmp_path: Path) -> Path:
    """An old crawler service's status export with one task of the config."""
    path = tmp_path / "old_status.json"
    row = {"task_id": "jobs_beijing", "total": 100, "last_start_offset": 50, "status": "stopped"}
    path.write_text(json.dumps([row | {"filtered_count": 5, "produced_count": 5}]))
    return path


def assert_clear_failure(done: subprocess.CompletedProcess[str], *names: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 2, f"exit {done.returncode}: {output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors, f"no error line on stderr: {done.stderr[-3000:]}"
    for name in names:
        assert any(name in line for line in errors), f"{name!r} not named in {errors}"
    assert any("unreachable" in line and "start " in line for line in errors), errors


@pytest.mark.parametrize("args", POSTGRES_COMMANDS, ids=" ".join)
def test_a_command_with_postgresql_down_says_so_and_exits_2(stack, positions, args):
    conn = f"postgresql://crawler:secret@127.0.0.1:{closed_port()}/crawler"

    done = run_cli(args, positions, AIRFLOW_CONN_CRAWLER_DB=conn)

    assert_clear_failure(done, "PostgreSQL (connection 'crawler_db')", "AIRFLOW_CONN_CRAWLER_DB")


@pytest.mark.parametrize("args", KAFKA_COMMANDS, ids=" ".join)
def test_a_live_status_with_kafka_down_says_so_and_exits_2(stack, positions, args):
    port = closed_port()
    conn = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{port}"}})

    done = run_cli(args, positions, AIRFLOW_CONN_KAFKA_DEFAULT=conn)

    assert_clear_failure(done, "Kafka (connection 'kafka_default'", f"127.0.0.1:{port}", "--no-live")
    if "--json" in args:
        report = json.loads(done.stdout)
        assert report["tasks"], "the report of what could be read is still printed"


@pytest.mark.parametrize("args", METADATA_DB_COMMANDS, ids=" ".join)
def test_a_command_with_the_airflow_metadata_db_down_says_so_and_exits_2(stack, positions, args):
    conn = f"postgresql+psycopg2://airflow:secret@127.0.0.1:{closed_port()}/airflow"

    done = run_cli(args, positions, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=conn)

    assert_clear_failure(done, "Airflow's metadata database", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--no-live"],
        ["skip-batch", "--task", "jobs_beijing", "--offset", "0"],
        ["check", "--task", "jobs_beijing"],
    ],
)
def test_with_every_service_up_the_same_commands_do_not_report_one_down(stack, positions, args):
    done = run_cli(args, positions)

    assert "unreachable" not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode in (0, 1), done.stdout + done.stderr  # skip-batch: no parked batch at offset 0
