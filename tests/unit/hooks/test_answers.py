"""The bounded read every HTTP client of the package uses (crawler_ops.hooks.answers), on answers made in memory:
its caps on size and inflation, and what passes them."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Iterator

import httpx
import pytest

from crawler_ops.errors import AnswerTooHeavyError
from crawler_ops.hooks.answers import INFLATION_FLOOR, MAX_INFLATION, read_bounded, read_start


class Pieces(httpx.SyncByteStream):
    """A body arriving in pieces of ``size`` bytes, as a socket gives it (never decoded by httpx)."""

    def __init__(self, body: bytes, size: int = 16 * 1024) -> None:
        self.body, self.size = body, size

    def __iter__(self) -> Iterator[bytes]:
        for i in range(0, len(self.body), self.size):
            yield self.body[i : i + self.size]


def answer(body: bytes, encoding: str | None = "gzip") -> httpx.Response:
    headers = {"Content-Encoding": encoding} if encoding else {}
    return httpx.Response(200, headers=headers, stream=Pieces(body))


def test_a_body_inflating_past_the_ratio_is_refused_however_high_its_cap():
    bomb = gzip.compress(b"\0" * (256 * 2**20), compresslevel=9)  # about 1,000 times
    tracemalloc.start()
    with pytest.raises(AnswerTooHeavyError, match=rf"inflates more than {MAX_INFLATION} times") as refused:
        read_bounded(answer(bomb), 2**40, "registry answer")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert refused.value.retriable is False
    assert peak < 3 * MAX_INFLATION * 16 * 1024 + INFLATION_FLOOR, f"{peak / 2**20:.1f} MiB held before the refusal"


def test_records_compressing_as_json_does_pass_and_come_back_whole():
    records = [{"id": i, "title": "engineer", "city": "Hangzhou", "aae397": "2026-12-01"} for i in range(60_000)]
    body = json.dumps(records).encode()
    packed = gzip.compress(body)
    assert len(body) / len(packed) > 10, "a realistic ratio, well inside the bound"

    assert read_bounded(answer(packed), len(body), "page") == body
    assert read_bounded(answer(zlib.compress(body), "deflate"), len(body), "page") == body


def test_a_small_body_is_never_judged_by_its_ratio():
    tiny = gzip.compress(b"\0" * (INFLATION_FLOOR // 2))
    assert read_bounded(answer(tiny), INFLATION_FLOOR, "count") == b"\0" * (INFLATION_FLOOR // 2)


def test_the_start_of_a_bomb_is_read_without_inflating_the_rest():
    bomb = gzip.compress(b"x" * (64 * 2**20), compresslevel=9)
    assert read_start(answer(bomb), 100) == b"x" * 100
