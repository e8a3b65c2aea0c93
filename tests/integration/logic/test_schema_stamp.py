"""``create_schema`` on a schema already at this version takes no table lock; on an older one it applies the DDL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from crawler_ops.hooks.db import create_schema, schema_stamp


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


def test_a_schema_stamped_by_another_version_is_upgraded_and_stamped(
    pg: psycopg.Connection[Any], crawler_schema: None
) -> None:
    pg.execute("COMMENT ON SCHEMA crawler_ops IS 'crawler_ops schema of an older release'")
    try:
        with pg.transaction(), pg.cursor() as cur:
            # The DDL runs: inside this transaction it holds the schema's advisory lock and the index locks.
            create_schema(cur)
            locks = cur.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
            ).fetchone()
            assert locks is not None and locks[0] == 1
    finally:
        if stamp_of(pg) != schema_stamp():
            with pg.transaction(), pg.cursor() as cur:
                create_schema(cur)
    assert stamp_of(pg) == schema_stamp()


@pytest.mark.parametrize("comment", [None, "something an operator wrote"])
def test_any_other_comment_counts_as_not_current(
    pg: psycopg.Connection[Any], crawler_schema: None, comment: str | None
) -> None:
    pg.execute(psycopg.sql.SQL("COMMENT ON SCHEMA crawler_ops IS {}").format(psycopg.sql.Literal(comment)))
    with pg.transaction(), pg.cursor() as cur:
        create_schema(cur)
    assert stamp_of(pg) == schema_stamp()
