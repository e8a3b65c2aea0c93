"""dev/stack.py's handling of bad situations, without starting any service (each name patched and called in the
module of dev/ that defines it: stack_common, kafka_server, postgres_stack, airflow_stack, pg_server)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import psycopg
import pytest

import airflow_stack
import kafka_server
import postgres_stack
import stack_common
from pg_server import write_private


@pytest.fixture
def stack_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(stack_common, "RUN", tmp_path)
    return tmp_path


def test_a_taken_preferred_port_is_replaced_by_a_free_one(monkeypatch, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setenv("CRAWLER_OPS_SOURCE_PORT", str(taken))

        chosen = stack_common.choose_port("source", [])

    assert chosen != taken
    assert f"port {taken} is taken by another program; using free port {chosen}" in capsys.readouterr().out


def test_a_stale_pid_file_is_detected_and_removed(stack_dir, capsys):
    (stack_dir / "kafka.pid").write_text("999999999")

    assert stack_common.running_pid("kafka") is None
    assert not (stack_dir / "kafka.pid").exists()
    assert "removing stale pid file" in capsys.readouterr().out


def test_our_own_live_process_is_recognised(stack_dir):
    (stack_dir / "source.pid").write_text(str(os.getpid()))

    assert stack_common.running_pid("source") == os.getpid()


def test_missing_java_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(stack_common.StackError, match=r"Java 17 or newer is needed.*apt-get install openjdk-17"):
        kafka_server.java_cmd()


def test_missing_maven_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(kafka_server, "KAFKA_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(stack_common.StackError, match=r"Maven is needed.*apt-get install maven"):
        kafka_server.kafka_classpath()


def test_an_unreachable_external_postgres_fails_fast_with_a_clear_error(monkeypatch):
    # A non-routable address: without a connect timeout this would hang.
    monkeypatch.setenv("CRAWLER_OPS_PG_URI", "postgresql://postgres@10.255.255.1:5432/crawler")
    timeouts = []
    real_connect = psycopg.connect

    def connect(*args, **kwargs):
        timeouts.append(kwargs.get("connect_timeout"))
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", connect)

    with pytest.raises(stack_common.StackError, match="cannot connect to CRAWLER_OPS_PG_URI within 5s"):
        postgres_stack.start_postgres(stack_common.Ports(1, 2, 3, 4))

    assert timeouts == [5], "every connection attempt is bounded by a connect timeout"


def test_the_uri_the_stacks_env_sh_exports_names_its_own_server_not_an_external_one(monkeypatch, tmp_path):
    # A shell that sourced .stack/env.sh has the stack's own server in CRAWLER_OPS_PG_URI: `down` must still stop that
    # server (and `clean` must not remove its data while it runs), and `up` must start it again.
    monkeypatch.setattr(postgres_stack, "STACK", tmp_path)
    write_private(tmp_path / "postgres.password", "0a1b2c\n")

    def external(uri: str | None) -> str | None:
        if uri is None:
            monkeypatch.delenv("CRAWLER_OPS_PG_URI", raising=False)
        else:
            monkeypatch.setenv("CRAWLER_OPS_PG_URI", uri)
        return postgres_stack.external_postgres()

    assert external(None) is None
    assert external("postgresql://postgres:0a1b2c@127.0.0.1:15432/crawler") is None
    assert external("postgresql://postgres:0a1b2c@localhost:5433/crawler") is None
    for other in (
        "postgresql://postgres:0a1b2c@db.internal:5432/crawler",  # the same password elsewhere is another server
        "postgresql://postgres:other@127.0.0.1:15432/crawler",
        "postgresql://postgres@127.0.0.1:5432/crawler",
    ):
        assert external(other) == other
    (tmp_path / "postgres.password").unlink()  # a stack without its own server's password has no own URI
    assert external("postgresql://postgres:0a1b2c@127.0.0.1:15432/crawler") is not None


def test_kafka_cluster_ids_never_start_with_a_dash_and_hold_a_uuid():
    import base64
    import uuid

    ids = [kafka_server.new_cluster_id() for _ in range(5_000)]

    assert not [i for i in ids if i.startswith("-")], "the storage tool would read it as an option"
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
    assert uuid.UUID(bytes=base64.urlsafe_b64decode(ids[0] + "=="))


def test_the_scheduler_and_triggerer_serve_no_logs_on_every_interface():
    for service in ("scheduler", "triggerer"):
        assert airflow_stack.airflow_service_args(service, 1) == [service, "--skip-serve-logs"]
    assert airflow_stack.airflow_service_args("api-server", 8080) == ["api-server", "-H", "127.0.0.1", "-p", "8080"]


def test_files_with_secrets_are_private_even_when_they_existed_before(tmp_path: Path):
    path = tmp_path / "env.sh"
    path.write_text("old")
    path.chmod(0o644)

    write_private(path, "export SECRET=x\n")

    assert path.read_text() == "export SECRET=x\n" and path.stat().st_mode & 0o777 == 0o600


def test_a_stack_made_before_passwords_keeps_its_trust_login_and_its_folder_mode(monkeypatch, tmp_path: Path):
    from pg_server import EmbeddedPostgres

    folder = tmp_path / ".stack"
    (folder / "pg" / "data").mkdir(parents=True)
    (folder / "pg" / "data" / "PG_VERSION").write_text("18\n")
    folder.chmod(0o755)  # its PostgreSQL user passes through it
    monkeypatch.setattr(stack_common, "STACK", folder)
    monkeypatch.setattr(stack_common, "LOGS", folder / "logs")
    monkeypatch.setattr(stack_common, "RUN", folder / "run")
    monkeypatch.setattr(stack_common.os, "umask", lambda mask: 0o022)  # the test process keeps its own umask

    stack_common.make_stack_dir()
    server = EmbeddedPostgres(folder, 15432)

    assert server.legacy and server.home == folder / "pg" and not (folder / "postgres.password").exists()
    assert server.uri("crawler") == "postgresql://postgres@127.0.0.1:15432/crawler"
    assert folder.stat().st_mode & 0o777 == 0o755


def test_a_stack_folder_made_by_hand_is_made_private(monkeypatch, tmp_path: Path):
    folder = tmp_path / ".stack"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)  # as `mkdir -p .stack` leaves it
    monkeypatch.setattr(stack_common, "STACK", folder)
    monkeypatch.setattr(stack_common, "LOGS", folder / "logs")
    monkeypatch.setattr(stack_common, "RUN", folder / "run")
    monkeypatch.setattr(stack_common.os, "umask", lambda mask: 0o022)

    stack_common.make_stack_dir()

    assert folder.stat().st_mode & 0o777 == 0o700


def test_the_stack_script_started_from_another_python_runs_under_the_project_venv(tmp_path):
    """``python dev/stack.py status`` from an interpreter without the project's packages starts again under
    ``.venv``'s python instead of failing on a missing import."""
    import subprocess
    import sys

    base_python = Path(sys.base_prefix) / "bin" / "python3"
    has_psycopg = subprocess.run([base_python, "-c", "import psycopg"], capture_output=True).returncode == 0
    if has_psycopg:
        pytest.skip(f"{base_python} has psycopg: it cannot show the missing import")
    script = Path(stack_common.REPO) / "dev" / "stack.py"
    # A started stack whose services are all gone: status asks PostgreSQL (psycopg), Kafka and the source.
    unused = stack_common.free_port()
    state = {
        "ports": {"kafka": unused, "source": unused},
        "env": {"CRAWLER_OPS_PG_URI": f"postgresql://x@127.0.0.1:{unused}/x"},
    }
    (tmp_path / "stack.json").write_text(json.dumps(state))
    env = {**os.environ, "CRAWLER_OPS_STACK_DIR": str(tmp_path)}
    env.pop("VIRTUAL_ENV", None)

    done = subprocess.run([base_python, script, "status"], capture_output=True, text=True, env=env, timeout=60)

    assert "Traceback" not in done.stderr, done.stderr
    expected = ["postgres  DOWN", "kafka     DOWN", "source    DOWN", "registry  DOWN"]
    assert done.stdout.splitlines() == expected, done.stdout + done.stderr
