"""``create_schema`` on a schema already at this version takes no table lock; on an older one it applies the DDL."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from crawler_ops.hooks.store.db import create_schema, schema_stamp


def stamp_of(pg: psycopg.Connection[Any]) -> str | None:
    row = pg.execute("SELECT obj_description('crawler_ops'::regnamespace, 'pg_namespace')").fetchone()
    return None if row is None else row[0]


def test_a_current_schema_is_left_alone_while_a_run_writes_its_tables(
    pg: psycopg.Connection[Any], pg_url: str, crawler_schema: None
) -> None:
    # A run's transaction writing crawl_error holds ROW EXCLUSIVE on it until it commits; re-running the DDL would wait
    # for it (CREATE INDEX IF NOT EXISTS takes SHARE), which is how two plans and a writer deadlock.
    with psycopg.connect(pg_url) as writer:
        writer.execute("LOCK TABLE crawler_ops.crawl_error IN ROW EXCLUSIVE MODE")
        with psycopg.connect(pg_url, autocommit=True) as planner:
            planner.execute("SET lock_timeout = '2s'")
            with planner.transaction(), planner.cursor() as cur:
                create_schema(cur)
        writer.rollback()
    assert stamp_of(pg) == schema_stamp()


def upgraded_from(pg: psycopg.Connection[Any], comment: str | None) -> tuple[str | None, int]:
    """``create_schema`` on the crawler_ops schema commented ``comment``, inside a transaction rolled back after:
    the stamp it left and the advisory locks it held. Concurrent tests never see the other comment (they would run
    the DDL beside their writers); a lock wait on a table they write gives up after 0.5 s and is tried again."""
    for _attempt in range(10):
        try:
            with pg.transaction(force_rollback=True), pg.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '500ms'")
                cur.execute(psycopg.sql.SQL("COMMENT ON SCHEMA crawler_ops IS {}").format(psycopg.sql.Literal(comment)))
                create_schema(cur)
                row = cur.execute(
                    "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
                ).fetchone()
                return stamp_of(pg), 0 if row is None else int(row[0])
        except psycopg.errors.LockNotAvailable:
            continue
    raise AssertionError("the schema's tables stayed locked by other tests for 10 attempts")


@pytest.mark.parametrize("comment", ["crawler_ops schema of an older release", None, "something an operator wrote"])
def test_a_schema_stamped_otherwise_is_upgraded_and_stamped(
    pg: psycopg.Connection[Any], crawler_schema: None, comment: str | None
) -> None:
    stamp, advisory_locks = upgraded_from(pg, comment)
    assert stamp == schema_stamp()
    assert advisory_locks == 1, "the DDL ran, under the schema's advisory lock"
    assert stamp_of(pg) == schema_stamp(), "rolled back: the schema keeps its stamp"


def test_first_callers_on_autocommit_connections_create_the_schema_once_between_them(
    pg: psycopg.Connection[Any], pg_url: str, name: str
) -> None:
    # A database without the schema, and several callers at once, each on an autocommit connection (as a test
    # session's workers start): the advisory lock must hold until the DDL is done, or two run CREATE SCHEMA.
    pg.execute(f'CREATE DATABASE "{name}"')
    try:
        url = pg_url.rsplit("/", 1)[0] + f"/{name}"
        callers = 6
        start = threading.Barrier(callers)
        failures: list[psycopg.Error] = []

        def create() -> None:
            with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
                start.wait()
                try:
                    create_schema(cur)
                except psycopg.Error as exc:  # every caller's failure is reported, not only the first
                    failures.append(exc)

        threads = [threading.Thread(target=create) for _ in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == []
        with psycopg.connect(url, autocommit=True) as conn:
            assert stamp_of(conn) == schema_stamp()
    finally:
        pg.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
