"""A hostile source on loopback: what an error body or a page can cost the crawler (memory, retries, time)."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator

import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.hook import SourceApiHook
from tests.hostile_source import HostileSource, peak_bytes

# 64 MiB of text inflating from about 64 KiB: an HTTP 500 carrying it must not be inflated.
BOMB = gzip.compress(b"<html>internal error " + b"A" * (64 * 2**20), compresslevel=9)
DEEP = b'{"code":0,"data":{"total":1,"data":[' + b"[" * 100_000 + b"]" * 100_000 + b"]}}"


@pytest.fixture
def hostile(airflow_connection: Callable[..., None]) -> Iterator[HostileSource]:
    source = HostileSource()
    airflow_connection("src", **source.connection())
    yield source
    source.close()


def hook() -> SourceApiHook:
    cfg = SourceConfig(conn_id="src", backoff_s=0.01, max_backoff_s=0.01, max_retries=2)
    return SourceApiHook(cfg, "jobs", "remote_jobs")


def test_a_gzip_bomb_on_an_error_reads_a_kilobyte_and_quotes_its_start(hostile):
    hostile.replies["count"] = (500, {"Content-Encoding": "gzip", "Content-Type": "text/html"}, BOMB)

    peak, raised = peak_bytes(hook().get_total)

    assert isinstance(raised, SourceError) and raised.retriable
    assert "answered HTTP 500: '<html>internal error AAAA" in str(raised)
    assert len(str(raised)) < 600, "the excerpt is short"
    assert hostile.served == ["count"] * 3, "retried as a 500 is"
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB allocated for three error bodies"


def test_json_nested_too_deeply_is_a_source_error_not_retried(hostile):
    hostile.replies["list"] = (200, {"Content-Type": "application/json"}, DEEP)

    with pytest.raises(SourceError, match="nested too deeply") as err:
        hook().get_page(0, 100)

    assert err.value.retriable is False
    assert hostile.served == ["list"], "a page that cannot decode is not fetched again"


def test_a_page_trickling_a_byte_at_a_time_fails_by_its_deadline_as_a_retriable_timeout_naming_task_and_offsets(
    hostile,
):
    hostile.replies["list"] = (200, {"Content-Type": "application/json"}, b'{"code":0,"data":{"data":[]}}' + b" " * 64)
    hostile.drips["list"] = 0.5
    cfg = SourceConfig(conn_id="src", max_retries=0, timeout_s=30, deadline_s=2)

    with pytest.raises(SourceError) as err:
        # One record: a page of more is read in parts (tests/unit/hooks/source/test_parts.py).
        SourceApiHook(cfg, "jobs", "remote_jobs").get_page(300, 1)

    assert err.value.retriable is True
    assert str(err.value).startswith(
        "task jobs: GET /api/remote_jobs/list offsets [300, 301) did not finish within its deadline of 2s"
    )
    assert hostile.served == ["list"] and hostile.finished == [], "given up before the 47 s body was sent"


def test_a_source_behind_the_environments_http_proxy_is_reached_through_it_within_the_deadline(
    hostile, airflow_connection, monkeypatch
):
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{hostile.connection()['port']}")
    airflow_connection("src", conn_type="http", host="source.invalid", schema="http")
    hostile.replies["count"] = (200, {"Content-Type": "application/json"}, b'{"code":0,"data":{"total":7}}')

    assert hook().get_total() == 7, "the proxy (this server) answered for source.invalid"

    hostile.drips["count"] = 0.5
    cfg = SourceConfig(conn_id="src", max_retries=0, deadline_s=1)
    with pytest.raises(SourceError, match="did not finish within its deadline of 1s"):
        SourceApiHook(cfg, "jobs", "remote_jobs").get_total()
    assert hostile.served == ["count", "count"] and hostile.finished == ["count"], "the trickled answer was cut"


# --------------------------------------------------------------------------- memory (issue 27 item 4)

EMPTY_RECORDS = b'{"code":0,"data":{"total":1,"data":[' + b",".join([b"{}"] * 1_000_000) + b"]}}"


def test_a_page_of_a_million_records_for_a_batch_of_100_stops_decoding_at_the_101st(hostile):
    hostile.replies["list"] = (200, {"Content-Type": "application/json"}, EMPTY_RECORDS)

    peak, raised = peak_bytes(lambda: hook().get_page(300, 100))

    assert isinstance(raised, SourceError), "the page is refused, not handed to the filter"
    assert "offsets [300, 400) has more than 100 records (the source ignores 'limit')" in str(raised)
    assert peak < 16 * 2**20, f"{peak / 2**20:.1f} MiB for three tries of a 3 MB page (decoded whole: 54 MiB each)"


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({}, b'{"code":0,"data":{"total":5}}' + b" " * 2**20),
        ({"Content-Encoding": "gzip"}, gzip.compress(b'{"code":0,"data":{"total":5}}' + b" " * 64 * 2**20)),
    ],
    ids=["padded", "gzip-bomb"],
)
def test_a_count_answer_is_read_to_64_kib_at_most(hostile, headers, body):
    hostile.replies["count"] = (200, {"Content-Type": "application/json", **headers}, body)

    peak, raised = peak_bytes(hook().get_total)

    assert isinstance(raised, SourceError) and raised.retriable is False
    assert re.search(r"GET /api/remote_jobs/count count: count answer (of \d+ bytes )?exceeds 64 KiB", str(raised))
    assert hostile.served == ["count"], "not retried"
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB for one count answer"
