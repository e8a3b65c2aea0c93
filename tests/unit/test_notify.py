"""Unit tests of crawler_ops.notify: the signature, the URL from the connection, and what is sent when."""

from __future__ import annotations

import hashlib
import hmac
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler_ops.notify import sign, webhook_url


@given(st.text(min_size=1), st.text(alphabet="0123456789", min_size=1, max_size=12), st.binary())
def test_the_signature_is_the_hmac_of_timestamp_dot_body(secret, timestamp, body):
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()

    assert sign(secret, timestamp, body) == f"sha256={expected}"
    assert sign(secret, timestamp, body) != sign(secret + "x", timestamp, body)
    assert sign(secret, timestamp, body) != sign(secret, timestamp + "1", body)


def conn(**fields: object) -> SimpleNamespace:
    base = {"conn_id": "hook", "host": None, "schema": None, "port": None, "extra_dejson": {}}
    return SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"host": "https://hooks.example.com/crawl?x=1"}, "https://hooks.example.com/crawl?x=1"),
        ({"host": "hooks.example.com"}, "https://hooks.example.com"),
        (
            {"host": "127.0.0.1", "schema": "http", "port": 8080, "extra_dejson": {"path": "in"}},
            "http://127.0.0.1:8080/in",
        ),
        ({"host": "h", "extra_dejson": {"path": "/a/b"}}, "https://h/a/b"),
    ],
)
def test_the_webhook_url_comes_from_the_connection(fields, url):
    assert webhook_url(conn(**fields)) == url


def test_a_connection_without_host_is_rejected_by_name():
    with pytest.raises(ValueError, match="connection 'hook' has no host"):
        webhook_url(conn())
