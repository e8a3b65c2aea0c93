"""A hostile Schema Registry on loopback: what its answers may cost a plan, a chunk or the status view's check
(memory, time), whatever it sends."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator

import pytest

from crawler_ops.errors import RegistryError
from crawler_ops.hooks.http import deadline
from crawler_ops.hooks.kafka.registry import MAX_ANSWER_BYTES, SchemaRegistryHook
from tests.hostile_source import HostileSource, peak_bytes

SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}}
# 64 MiB of JSON text inflating from about 64 KiB.
BOMB = gzip.compress(b'{"id":1,"version":1,"schema":"' + b" " * (64 * 2**20) + b'"}', compresslevel=9)


@pytest.fixture
def registry(airflow_connection: Callable[..., None]) -> Iterator[HostileSource]:
    server = HostileSource()
    airflow_connection("hostile_registry", **server.connection())
    yield server
    server.close()


def test_a_compressed_answer_that_inflates_like_a_bomb_is_refused_before_it_takes_memory(registry):
    registry.replies["latest"] = (200, {"Content-Encoding": "gzip", "Content-Type": "application/json"}, BOMB)

    peak, raised = peak_bytes(lambda: SchemaRegistryHook("hostile_registry").latest("t-value"))

    assert isinstance(raised, RegistryError), raised
    assert "connection 'hostile_registry'" in str(raised)
    assert "answer exceeds 4 MiB" in str(raised) or "inflates more than" in str(raised), raised
    assert raised.retriable is False
    assert registry.served == ["latest"], "a bomb is not asked for again"
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB allocated for one answer"


def test_an_answer_over_its_cap_is_refused_declared_or_streamed(registry):
    registry.replies["latest"] = (200, {"Content-Type": "application/json"}, b" " * (MAX_ANSWER_BYTES + 1))

    peak, raised = peak_bytes(lambda: SchemaRegistryHook("hostile_registry").latest("t-value"))

    assert isinstance(raised, RegistryError) and "exceeds 4 MiB" in str(raised), raised
    assert raised.retriable is False
    assert peak < 2 * 2**20, "refused by its declared length, before its body is read"


def test_a_registry_trickling_its_answer_ends_by_the_enclosing_deadline_retries_included(registry):
    registry.replies["versions"] = (200, {"Content-Type": "application/json"}, b'{"id": 7}' + b" " * 64)
    registry.drips["versions"] = 0.5

    started = time.monotonic()
    with pytest.raises(RegistryError) as failed, deadline(3.0):
        SchemaRegistryHook("hostile_registry").register("t-value", SCHEMA, "JSON")
    took = time.monotonic() - started

    assert failed.value.retriable is True
    assert took < 4.5, f"the call took {took:.1f}s against a deadline of 3 s"


def test_a_registry_trickling_its_answer_times_out_each_try_by_the_hooks_own_timeout(registry):
    registry.replies["latest"] = (200, {"Content-Type": "application/json"}, b'{"id": 7}' + b" " * 64)
    registry.drips["latest"] = 0.3

    started = time.monotonic()
    with pytest.raises(RegistryError, match=r"no whole answer within 1s"):
        SchemaRegistryHook("hostile_registry", timeout_s=1.0).latest("t-value")
    took = time.monotonic() - started

    assert registry.served == ["latest"] * 4, "timeouts are retried as a registry that did not answer"
    assert took < 4 * 1.0 + 10.0 + 2.0, "each try within its timeout, the waits within the policy's budget"


def test_an_error_answer_that_is_not_json_is_quoted_short(registry):
    registry.replies["latest"] = (500, {"Content-Type": "text/html"}, b"<html>" + b"x" * 100_000)

    with pytest.raises(RegistryError, match=r"HTTP 500: <html>x+$") as failed:
        SchemaRegistryHook("hostile_registry", timeout_s=2.0).latest("t-value")

    assert len(str(failed.value)) < 700
