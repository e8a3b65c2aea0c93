"""Fast tests of the logic that lives in PostgreSQL statements and Kafka calls, on the stack's real services.

Each test takes well under a second and works in a namespace of its own (a schema, a task id, a source connection
id, a topic), which it removes when it ends, so two mutation-test workers (``make mutation``) can run them at once.
Connections are opened inside each test, never at import, so a forked mutant worker inherits none.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

# The Airflow connection ids the hooks use; the stack's env.sh (or the stack state) defines them.
DB_CONN = "crawler_db"
KAFKA_CONN = "kafka_default"


def stack_value(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: source .stack/env.sh after `make stack-up` (make mutation does both)")
    return value


@pytest.fixture
def pg_url() -> str:
    return stack_value("CRAWLER_OPS_PG_URI")


@pytest.fixture
def pg(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection of this test's own."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def name() -> str:
    """A name no other test (nor a concurrent worker) uses: for schemas, task ids, source connection ids."""
    return f"mut_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def schema(pg: psycopg.Connection[Any], name: str) -> Iterator[str]:
    """A schema of this test's own, dropped with everything in it."""
    pg.execute(f'CREATE SCHEMA "{name}"')
    yield name
    pg.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def crawler_schema(pg: psycopg.Connection[Any]) -> None:
    """The crawler_ops schema exists (created once by any crawl; idempotent)."""
    # Imported here, not with the module: Airflow reads its settings when first imported, and pytest loads this
    # conftest before the stack's environment when the folder is named on the command line.
    from crawler_ops.hooks.store.db import create_schema

    with pg.transaction(), pg.cursor() as cur:
        create_schema(cur)


@pytest.fixture
def task(pg: psycopg.Connection[Any], crawler_schema: None, name: str) -> Iterator[str]:
    """A crawl task id of this test's own; its rows in the crawler_ops schema are removed afterwards."""
    yield name
    columns = pg.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'crawler_ops' "
        "AND column_name IN ('task_name', 'task_id') AND table_name IN "
        "(SELECT table_name FROM information_schema.tables WHERE table_schema = 'crawler_ops' "
        "AND table_type = 'BASE TABLE')"
    ).fetchall()
    for table, column in sorted(columns):
        pg.execute(f'DELETE FROM crawler_ops."{table}" WHERE "{column}" = %s', (name,))
