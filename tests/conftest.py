"""Test harness: point Airflow and the tests at the local stack (started by dev/stack.py when needed).

The environment is loaded before Airflow is imported anywhere, so AIRFLOW_HOME and the AIRFLOW_CONN_*
connections of the stack apply. Unit tests never start a service; the ``stack`` fixture does, once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support import DemoSource

REPO = Path(__file__).resolve().parent.parent
STATE_FILE = Path(os.environ.get("CRAWLER_OPS_STACK_DIR", REPO / ".stack")) / "stack.json"


def load_stack_env() -> bool:
    try:
        env = json.loads(STATE_FILE.read_text())["env"]
    except (OSError, ValueError, KeyError):
        return False
    os.environ.update(env)
    return True


load_stack_env()


@pytest.fixture(scope="session")
def stack() -> dict[str, str]:
    """The running local stack's environment; starts it (idempotently) when it is not up."""
    status = subprocess.run([sys.executable, str(REPO / "dev" / "stack.py"), "status"], capture_output=True)
    if status.returncode != 0:
        subprocess.run([sys.executable, str(REPO / "dev" / "stack.py"), "up"], check=True)
    assert load_stack_env(), f"dev/stack.py up did not write {STATE_FILE}"
    return json.loads(STATE_FILE.read_text())["env"]


@pytest.fixture
def unique_id() -> str:
    """A name no other test uses: task ids, topics and tables are derived from it."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def source_url(stack: dict[str, str]) -> str:
    return stack["CRAWLER_OPS_SOURCE_URL"]


@pytest.fixture(scope="session")
def kafka_bootstrap(stack: dict[str, str]) -> str:
    return stack["CRAWLER_OPS_KAFKA_BOOTSTRAP"]


@pytest.fixture(scope="session")
def pg_uri(stack: dict[str, str]) -> str:
    return stack["CRAWLER_OPS_PG_URI"]


@pytest.fixture
def source(source_url: str) -> DemoSource:
    """Admin client of the demo source API."""
    from tests.support import DemoSource

    return DemoSource(source_url)


@pytest.fixture
def pg_schema(pg_uri: str, unique_id: str) -> Iterator[str]:
    """A fresh PostgreSQL schema for one test, dropped afterwards."""
    import psycopg

    name = f"test_{unique_id}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')
