"""Create the crawler's database and user on the metadata database's server, when missing (Helm's migration job).

    python /opt/airflow/include/deploy/create_crawler_db.py

The crawler database is the one ``AIRFLOW_CONN_CRAWLER_DB`` names (a URI or Airflow's JSON form): its login,
password and database. They are created with the metadata connection's credentials
(``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), which on the chart's bundled PostgreSQL is its superuser; a crawler
database on another server, or a metadata user without CREATEROLE/CREATEDB, is left alone with a message (create it
there once, as docs/deploy.md says). Idempotent: an existing user keeps its password, an existing database is kept.
docker-compose.yaml does the same with include/deploy/postgres-init.sh.
"""

from __future__ import annotations

import json
import os
import sys
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import sql


def crawler_connection(value: str) -> dict[str, str]:
    """Host, port, login, password and database of an Airflow connection given as a URI or as JSON."""
    if value.lstrip().startswith("{"):
        conn = json.loads(value)
        return {
            "host": conn["host"],
            "port": str(conn.get("port") or 5432),
            "login": conn["login"],
            "password": conn.get("password", ""),
            "db": conn.get("schema") or conn["login"],
        }
    url = urlsplit(value)
    return {
        "host": url.hostname or "",
        "port": str(url.port or 5432),
        "login": unquote(url.username or ""),
        "password": unquote(url.password or ""),
        "db": url.path.lstrip("/") or unquote(url.username or ""),
    }


def main() -> int:
    crawler = crawler_connection(os.environ["AIRFLOW_CONN_CRAWLER_DB"])
    admin_url = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("+psycopg2", "").replace("+psycopg", "")
    admin = urlsplit(admin_url)
    if (admin.hostname, str(admin.port or 5432)) != (crawler["host"], crawler["port"]):
        print(f"create_crawler_db: {crawler['db']} is on {crawler['host']}, not the metadata server: left alone")
        return 0
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (crawler["login"],)).fetchone() is None:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(crawler["login"]), sql.Literal(crawler["password"])
                )
            )
            print(f"create_crawler_db: user {crawler['login']} created")
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (crawler["db"],)).fetchone() is None:
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(crawler["db"]), sql.Identifier(crawler["login"])
                )
            )
            print(f"create_crawler_db: database {crawler['db']} created")
    return 0


if __name__ == "__main__":
    sys.exit(main())
