"""The source client: a verifying TLS context for an https source only, made at its first https request (loading the
CA bundle costs 0.1-0.2 s)."""

from __future__ import annotations

import json
import ssl

import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.hooks.source.hook import SourceApiHook


@pytest.mark.parametrize(
    ("conn", "origin", "verify_mode"),
    [
        ({"conn_type": "http", "host": "api.example.com", "schema": "https"}, "api.example.com", ssl.CERT_REQUIRED),
        ({"conn_type": "http", "host": "https://gateway.example.com/base"}, "gateway.example.com", ssl.CERT_REQUIRED),
        ({"conn_type": "http", "host": "127.0.0.1", "port": 18080, "schema": "http"}, "127.0.0.1", None),
    ],
    ids=["https-schema", "https-in-host", "plain-http"],
)
def test_only_an_https_source_gets_a_verifying_tls_context(monkeypatch, conn, origin, verify_mode) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPEED_SOURCE", json.dumps(conn))
    hook = SourceApiHook(SourceConfig(conn_id="speed_source"), "t", "t")
    transport = hook.client._transport
    scheme = "http" if verify_mode is None else "https"

    connection = transport.checkout((scheme, origin, 18080 if verify_mode is None else 443), {})  # not connected yet

    if verify_mode is None:
        assert (connection.context, transport.context, transport.verify) == (None, None, False)
    else:
        assert connection.context is transport.context
        assert connection.context.verify_mode == verify_mode
    hook.close()
