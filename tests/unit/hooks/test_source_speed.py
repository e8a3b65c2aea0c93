"""The source client: a verifying TLS context for an https source only (loading the CA bundle costs 0.1-0.2 s)."""

from __future__ import annotations

import json
import ssl

import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.hooks.source import SourceApiHook


@pytest.mark.parametrize(
    ("conn", "verify_mode"),
    [
        ({"conn_type": "http", "host": "api.example.com", "schema": "https"}, ssl.CERT_REQUIRED),
        ({"conn_type": "http", "host": "https://gateway.example.com/base"}, ssl.CERT_REQUIRED),
        ({"conn_type": "http", "host": "127.0.0.1", "port": 18080, "schema": "http"}, ssl.CERT_NONE),
    ],
    ids=["https-schema", "https-in-host", "plain-http"],
)
def test_only_an_https_source_gets_a_verifying_tls_context(monkeypatch, conn, verify_mode) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPEED_SOURCE", json.dumps(conn))
    hook = SourceApiHook(SourceConfig(conn_id="speed_source"), "t", "t")

    context = hook.client._transport._pool._ssl_context  # httpx keeps the context its transport was built with

    assert context.verify_mode == verify_mode
    hook.close()
