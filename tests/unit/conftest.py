"""Unit tests need no services: whatever the session loaded, each unit test runs without the stack's connections
and config, so a connection a test forgot to define fails instead of reaching a real service."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def no_stack_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("AIRFLOW_CONN_", "CRAWLER_OPS_")):
            monkeypatch.delenv(name)
