"""Unit tests need no services: whatever the session loaded, each unit test runs without the stack's connections
and config, so a connection a test forgot to define fails instead of reaching a real service."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def no_stack_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("AIRFLOW_CONN_", "CRAWLER_OPS_")):
            monkeypatch.delenv(name)


@pytest.fixture
def airflow_connection(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Define an Airflow connection for one test: ``define("src", conn_type="http", host=...)`` sets
    ``AIRFLOW_CONN_SRC`` (removed after the test)."""

    def define(conn_id: str, **fields: Any) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))

    return define
