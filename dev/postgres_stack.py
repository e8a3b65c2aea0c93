"""The stack's PostgreSQL: the embedded server of ``pg_server.py`` (or an external one named by
``CRAWLER_OPS_PG_URI``), the crawler's and Airflow's databases on it, the demo tables, and their URIs."""

from __future__ import annotations

import os
import time
import urllib.parse

from pg_server import PostgresError, password_file
from stack_common import REPO, STACK, Ports, StackError, log, pg_server

PG_DATABASE = "crawler"
AIRFLOW_DATABASE = "airflow"


def pg_ready(uri: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(uri, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def ensure_database(server_uri: str, name: str) -> None:
    """Create database ``name`` on the server ``server_uri`` connects to, unless it exists."""
    import psycopg

    try:
        with psycopg.connect(server_uri, autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise StackError(f"cannot create the PostgreSQL database {name!r}: {exc}".strip()) from exc


def with_database(uri: str, name: str, driver: str = "postgresql") -> str:
    """``uri`` (a postgresql:// URL) naming database ``name`` instead, with scheme ``driver``."""
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit((driver, parts.netloc, f"/{name}", parts.query, parts.fragment))


def metadata_db_uri(postgres_uri: str) -> str:
    """Airflow's metadata DB: database ``airflow`` on the crawler's PostgreSQL server (as in docker-compose),
    unless ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` names another."""
    return os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or with_database(
        postgres_uri, AIRFLOW_DATABASE, "postgresql+psycopg2"
    )


def external_postgres() -> str | None:
    """The server ``CRAWLER_OPS_PG_URI`` names when it is not the stack's own, else None.

    The stack's ``env.sh`` exports its own embedded server's URI under that name, so a shell that sourced it must
    still start, stop and remove that server: a URI to this host that carries the stack's generated password is the
    stack's own."""
    uri = os.environ.get("CRAWLER_OPS_PG_URI")
    if not uri:
        return None
    parts, own = urllib.parse.urlsplit(uri), password_file(STACK)
    password = urllib.parse.unquote(parts.password or "")
    if parts.hostname in ("127.0.0.1", "localhost") and own.exists() and password == own.read_text().strip():
        return None
    return uri


def start_postgres(ports: Ports) -> str:
    external = external_postgres()
    if external:
        import psycopg

        try:
            with psycopg.connect(external, connect_timeout=5):
                pass
        except psycopg.OperationalError as exc:
            raise StackError(
                f"cannot connect to CRAWLER_OPS_PG_URI within 5s: {exc}".strip()
                + "\n(if it came from the env.sh of a stack removed since: `unset CRAWLER_OPS_PG_URI "
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN` and run `up` again)"
            ) from exc
        log("postgres: using the external server from CRAWLER_OPS_PG_URI")
        if not os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
            ensure_database(external, AIRFLOW_DATABASE)
        return external
    server = pg_server(ports.postgres)
    try:
        if server.forget_orphan():
            log(f"postgres: removed {server.home}, left by an earlier {STACK} whose password is gone")
        server.prepare()
        if server.running() and pg_ready(server.uri("postgres")):
            log(f"postgres: already running on 127.0.0.1:{ports.postgres}")
        else:
            if server.running():
                log("postgres: a server runs on this data directory but does not answer; restarting it")
                server.stop("immediate")
            started = time.monotonic()
            server.start()
            log(f"postgres: started on 127.0.0.1:{ports.postgres} in {time.monotonic() - started:.1f}s")
    except PostgresError as exc:
        raise StackError(str(exc)) from exc
    if server.legacy:
        log(
            f"postgres: {server.data} predates passwords and trusts every local TCP client; "
            "`dev/stack.py clean` and `up` recreate it with one"
        )
    for database in (PG_DATABASE, AIRFLOW_DATABASE):
        ensure_database(server.uri("postgres"), database)
    seed_demo_tables(server.uri(PG_DATABASE))
    return server.uri(PG_DATABASE)


def seed_demo_tables(uri: str) -> None:
    """The executor demo's source_data_table (idempotent: filled only when empty)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True, connect_timeout=5) as conn:
        conn.execute((REPO / "include" / "sql" / "demo" / "source_data_table.sql").read_text(encoding="utf-8"))


def stop_postgres() -> None:
    server = pg_server()
    if server.running():
        server.stop()
        log("postgres: stopped")
