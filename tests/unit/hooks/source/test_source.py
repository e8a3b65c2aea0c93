"""Unit tests of crawler_ops.hooks.source.hook: the HTTP client built from the connection, what is retried and how long
it waits, response limits and shapes. The hook's own httpx client is routed through ``httpx.MockTransport`` (the
connection, headers, auth and timeouts stay the hook's), and its sleeps are recorded instead of slept."""

from __future__ import annotations

import base64
import email.utils
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest

from crawler_ops import retry
from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source import hook as source_module
from crawler_ops.hooks.source.hook import MAX_RETRY_AFTER_S, SourceApiHook
from tests.unit.hooks.mock_http import route_clients
from tests.waiting import wait_until

Reply = httpx.Response | Exception


@dataclass
class FakeSource:
    """Answers the hook's requests from a script (the last reply repeats) and keeps every request."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply


def count_body(total: Any = 1234) -> httpx.Response:
    return httpx.Response(200, json={"code": 0, "data": {"total": total}})


def page_body(records: list[dict[str, Any]]) -> httpx.Response:
    return httpx.Response(200, json={"code": 0, "data": {"total": 99, "data": records}})


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The hook's waits between attempts, recorded instead of slept."""
    waited: list[float] = []
    clock = {"sleep": staticmethod(waited.append), "monotonic": staticmethod(time.monotonic)}
    monkeypatch.setattr(source_module, "time", type("Clock", (), clock))
    monkeypatch.setattr(retry, "full_jitter", lambda ceiling: ceiling)  # each wait at its ceiling, not below it
    return waited


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, sleeps: list[float]) -> FakeSource:
    """Route every httpx client the hook builds through a :class:`FakeSource`."""
    served = FakeSource()
    route_clients(monkeypatch, served)
    return served


@pytest.fixture
def connection(airflow_connection: Callable[..., None]) -> Callable[..., None]:
    """The hook's connection ``src``; call it to redefine the connection's fields."""

    def define(**fields: Any) -> None:
        airflow_connection("src", conn_type="http", **fields)

    define(host="source.test", schema="http")
    return define


def make_hook(**source: Any) -> SourceApiHook:
    cfg = SourceConfig(conn_id="src", **{"backoff_s": 0.5, "max_backoff_s": 2.0, "max_retries": 3, **source})
    return SourceApiHook(cfg, "jobs", "remote_jobs")


# --------------------------------------------------------------------------- the connection


def test_the_connection_gives_the_base_url_basic_auth_and_extra_headers(fake, connection):
    connection(
        host="api.example.com",
        schema="https",
        port=8443,
        login="crawler",
        password="pa:ss",
        extra={"X-Api-Key": "k-1", "Accept-Language": "zh-CN"},
    )
    fake.replies = [count_body(7)]

    assert make_hook().get_total() == 7

    (request,) = fake.requests
    assert str(request.url) == "https://api.example.com:8443/api/remote_jobs/count"
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"crawler:pa:ss").decode()
    assert (request.headers["x-api-key"], request.headers["accept-language"]) == ("k-1", "zh-CN")


def test_a_host_with_a_scheme_is_used_as_it_is_and_no_login_sends_no_authorization(fake, connection):
    connection(host="http://gateway.test/base", extra={"nested": {"ignored": True}})
    fake.replies = [count_body()]

    make_hook().get_total()

    (request,) = fake.requests
    assert str(request.url) == "http://gateway.test/base/api/remote_jobs/count"
    assert "authorization" not in request.headers and "nested" not in request.headers


def test_pages_use_the_configured_paths_and_parameter_names(fake, connection):
    fake.replies = [httpx.Response(200, json={"result": {"items": [{"id": 1}, {"id": 2}], "next": None}})]
    hook = make_hook(page_path="/v2/{task}/items", records_path="result.items", offset_param="start", limit_param="n")

    records = hook.get_page(200, 2)

    assert [msgspec.json.decode(r) for r in records] == [{"id": 1}, {"id": 2}]
    (request,) = fake.requests
    assert request.url.path == "/v2/remote_jobs/items"
    assert dict(request.url.params) == {"start": "200", "n": "2"}


# --------------------------------------------------------------------------- what is retried


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422], ids=lambda s: f"http-{s}")
def test_a_4xx_fails_at_once_without_retries(fake, connection, sleeps, status):
    fake.replies = [httpx.Response(status, text="no such data set")]

    with pytest.raises(SourceError, match=f"task jobs: GET /api/remote_jobs/count count answered HTTP {status}") as err:
        make_hook(max_retries=5).get_total()

    assert err.value.retriable is False
    assert len(fake.requests) == 1 and sleeps == []


def test_5xx_is_retried_with_exponential_backoff_capped_then_given_up(fake, connection, sleeps):
    fake.replies = [httpx.Response(503)]

    with pytest.raises(SourceError, match=r"answered HTTP 503.*\(gave up after 5 attempts\)") as err:
        make_hook(max_retries=4, backoff_s=0.5, max_backoff_s=2.0).get_total()

    assert err.value.retriable is True
    assert len(fake.requests) == 5
    assert sleeps == [0.5, 1.0, 2.0, 2.0]


def test_a_transient_5xx_then_success_returns_the_answer(fake, connection, sleeps):
    fake.replies = [httpx.Response(500), httpx.Response(502), count_body(55)]

    assert make_hook().get_total() == 55
    assert len(fake.requests) == 3 and sleeps == [0.5, 1.0]


def test_a_timeout_is_retried_and_the_configured_timeout_applies_to_every_request(fake, connection, sleeps):
    fake.replies = [httpx.ReadTimeout("slow")]

    with pytest.raises(SourceError, match=r"timed out after 2.5s \(gave up after 3 attempts\)") as err:
        make_hook(timeout_s=2.5, max_retries=2).get_total()

    assert err.value.retriable is True
    assert len(fake.requests) == 3
    expected = dict.fromkeys(("connect", "read", "write", "pool"), 2.5)
    assert all(r.extensions["timeout"] == expected for r in fake.requests)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_source_that_never_answers_times_out_after_timeout_s(connection, silent_server):
    connection(host="127.0.0.1", port=silent_server)
    pool = ThreadPoolExecutor(1)
    asked = pool.submit(make_hook(timeout_s=0.3, max_retries=0).get_total)
    pool.shutdown(wait=False)
    wait_until(asked.done, 60, "the call to end by its timeout, the server never answering")
    error = asked.exception()

    assert isinstance(error, SourceError) and error.retriable is True
    assert "GET /api/remote_jobs/count count timed out after 0.3s" in str(error)


def test_a_connection_refused_is_retriable_and_names_the_request(fake, connection, sleeps):
    fake.replies = [httpx.ConnectError("connection refused")]

    with pytest.raises(SourceError, match=r"GET /api/remote_jobs/count count failed: ConnectError") as err:
        make_hook(max_retries=1).get_total()

    assert err.value.retriable is True and len(fake.requests) == 2


# --------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize("status", [429, 503], ids=["429", "503"])
def test_retry_after_in_seconds_is_waited_for_instead_of_the_backoff(fake, connection, sleeps, status):
    fake.replies = [httpx.Response(status, headers={"Retry-After": "7"}), count_body(3)]

    assert make_hook(backoff_s=0.5).get_total() == 3
    assert sleeps == [7.0]


def test_retry_after_as_an_http_date_is_waited_for_until_that_time(fake, connection, sleeps):
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    fake.replies = [httpx.Response(429, headers={"Retry-After": when}), count_body(3)]

    assert make_hook().get_total() == 3
    (waited,) = sleeps
    assert 28.0 <= waited <= 30.0, "HTTP dates have whole seconds"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("86400", MAX_RETRY_AFTER_S),
        (email.utils.format_datetime(datetime(2100, 1, 1, tzinfo=UTC), usegmt=True), MAX_RETRY_AFTER_S),
        (email.utils.format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True), 0.0),
        ("-5", 0.0),
        ("soon", 0.5),
    ],
    ids=["huge-seconds-capped", "far-date-capped", "past-date-no-wait", "negative-no-wait", "unparseable-backoff"],
)
def test_retry_after_is_capped_and_a_bad_value_falls_back_to_the_backoff(fake, connection, sleeps, header, expected):
    fake.replies = [httpx.Response(429, headers={"Retry-After": header}), count_body(3)]

    assert make_hook(backoff_s=0.5).get_total() == 3
    assert sleeps == [expected]


# --------------------------------------------------------------------------- size and shape


def test_a_declared_content_length_over_max_response_mb_fails_without_reading_or_retrying(fake, connection, sleeps):
    fake.replies = [httpx.Response(200, content=b"x" * 20_000)]

    # One record: nothing smaller to ask for (a page of more is read in parts, tests/unit/hooks/source/test_parts.py).
    with pytest.raises(SourceError, match=r"response of 20000 bytes exceeds source.max_response_mb") as err:
        make_hook(max_response_mb=0.01).get_page(0, 1)

    assert err.value.retriable is False and len(fake.requests) == 1 and sleeps == []


def test_a_streamed_body_over_max_response_mb_is_cut_off(fake, connection):
    # Chunked, so no content-length to check up front: 3 x 4,001 bytes against a limit of 10,485.
    fake.replies = [httpx.Response(200, content=iter([b"[" + b" " * 4_000] * 3))]

    with pytest.raises(SourceError, match=r"response exceeds source.max_response_mb") as err:
        make_hook(max_response_mb=0.01).get_page(0, 1)

    assert err.value.retriable is False


def test_a_body_of_exactly_max_response_mb_is_accepted(fake, connection):
    limit = int(0.01 * 1024 * 1024)
    head = b'{"data": {"data": [{"id": 1}]}, "pad": "'
    body = head + b"x" * (limit - len(head) - 2) + b'"}'
    assert len(body) == limit
    fake.replies = [httpx.Response(200, content=iter([body]))]

    assert [msgspec.json.decode(r) for r in make_hook(max_response_mb=0.01).get_page(0, 1)] == [{"id": 1}]


def test_malformed_json_is_retried_as_a_truncated_body(fake, connection, sleeps):
    fake.replies = [httpx.Response(200, content=b'{"data": {"data": [{"id"'), page_body([{"id": 1}])]

    assert len(make_hook().get_page(0, 1)) == 1
    assert len(fake.requests) == 2 and sleeps == [0.5]


def test_a_page_of_the_wrong_shape_fails_at_once_naming_the_records_path(fake, connection, sleeps):
    fake.replies = [httpx.Response(200, json={"code": 0, "data": {"items": []}})]

    with pytest.raises(SourceError, match=r"offsets \[0, 100\) has no list of records at 'data.data'") as err:
        make_hook().get_page(0, 100)

    assert err.value.retriable is False and len(fake.requests) == 1 and sleeps == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"data": {}}, r"count response has no 'data.total' \(missing 'total'\)"),
        ({"data": {"total": -1}}, r"total at 'data.total' is -1, not a non-negative integer"),
        ({"data": {"total": True}}, r"total at 'data.total' is True"),
        ({"data": {"total": "12"}}, r"total at 'data.total' is '12'"),
    ],
    ids=["missing", "negative", "boolean", "text"],
)
def test_an_unusable_total_fails_at_once_naming_the_path(fake, connection, sleeps, body, message):
    fake.replies = [httpx.Response(200, json=body)]

    with pytest.raises(SourceError, match=message) as err:
        make_hook().get_total()

    assert err.value.retriable is False and sleeps == []


# --------------------------------------------------------------------------- the rate limiter


@dataclass
class RecordingLimiter:
    requests: int = 0
    throttles: list[float | None] = field(default_factory=list)

    @contextmanager
    def request(self, max_wait: float | None = None) -> Iterator[None]:
        self.requests += 1
        yield

    def throttle(self, retry_after: float | None) -> None:
        self.throttles.append(retry_after)


@pytest.mark.parametrize(
    ("reply", "throttled"),
    [
        (httpx.Response(429), [None]),
        (httpx.Response(429, headers={"Retry-After": "2"}), [2.0]),
        (httpx.Response(503, headers={"Retry-After": "3"}), [3.0]),
        (httpx.Response(503), []),
        (httpx.Response(500), []),
    ],
    ids=["429", "429-retry-after", "503-retry-after", "503", "500"],
)
def test_every_request_waits_for_the_limiter_and_a_429_or_retry_after_slows_everyone(
    fake, connection, sleeps, reply, throttled
):
    fake.replies = [reply, count_body(3)]
    hook = make_hook()
    hook.limiter = RecordingLimiter()  # type: ignore[assignment]

    assert hook.get_total() == 3

    assert hook.limiter.requests == 2, "the failed try and the retry"
    assert hook.limiter.throttles == throttled


def test_a_hook_given_no_limiter_is_not_limited(fake, connection):
    fake.replies = [count_body(3)]

    assert make_hook().limiter is None


def test_a_404_is_no_reason_to_slow_down_and_fails_as_before(fake, connection, sleeps):
    fake.replies = [httpx.Response(404)]
    hook = make_hook()
    hook.limiter = RecordingLimiter()  # type: ignore[assignment]

    with pytest.raises(SourceError, match="HTTP 404"):
        hook.get_total()
    assert hook.limiter.throttles == []


# --------------------------------------------------------------------------- hostile Retry-After (issue 27)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        ("inf", 300.0),
        ("Infinity", 300.0),
        ("99999999999", 300.0),
        ("1e308", 300.0),
        ("nan", None),
        ("-5", 0.0),
        ("-inf", 0.0),
        ("soon", None),
        ("", None),
        (email.utils.format_datetime(datetime(2100, 1, 1, tzinfo=UTC), usegmt=True), 300.0),
        (email.utils.format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True), 0.0),
        ("Fri, 01 Jan 2100 00:00:00 -0000", 300.0),
        ("Fri, 01 Jan 99999 00:00:00 GMT", None),
    ],
    ids=[
        "seconds",
        "inf",
        "Infinity",
        "absurd",
        "huge-float",
        "nan",
        "negative",
        "minus-inf",
        "text",
        "empty",
        "far-date",
        "past-date",
        "date-without-zone",
        "year-99999",
    ],
)
def test_retry_after_is_validated_and_capped_whatever_the_source_sends(header, expected):
    from crawler_ops.retry import retry_after_seconds

    assert retry_after_seconds(header, 300.0) == expected


@pytest.mark.parametrize("header", ["inf", "99999999999", "nan"], ids=["inf", "absurd", "nan"])
def test_a_hostile_retry_after_is_waited_for_at_most_max_retry_after_s(fake, connection, sleeps, header):
    fake.replies = [httpx.Response(429, headers={"Retry-After": header}), count_body(3)]

    assert make_hook(backoff_s=0.5, max_retry_after_s=45).get_total() == 3
    assert sleeps == [0.5 if header == "nan" else 45.0], "capped by source.max_retry_after_s; NaN is no value"


@pytest.mark.parametrize("header", ["inf", "99999999999", "-1", "nan"], ids=["inf", "absurd", "negative", "nan"])
def test_the_limiter_is_told_only_a_validated_and_capped_retry_after(fake, connection, sleeps, header):
    fake.replies = [httpx.Response(429, headers={"Retry-After": header}), count_body(3)]
    hook = make_hook(max_retry_after_s=45)
    hook.limiter = RecordingLimiter()  # type: ignore[assignment]

    assert hook.get_total() == 3

    assert hook.limiter.throttles == [{"inf": 45.0, "99999999999": 45.0, "-1": 0.0, "nan": None}[header]]


def test_a_source_paused_beyond_the_deadline_fails_the_request_at_once_naming_task_and_url(fake, connection, sleeps):
    from crawler_ops.errors import SourcePausedError

    class PausedLimiter(RecordingLimiter):
        @contextmanager
        def request(self, max_wait: float | None = None) -> Iterator[None]:
            self.requests += 1
            raise SourcePausedError(
                "source connection 'src' has no request slot for 3.6e+03s", retriable=True, retry_after=3600.0
            )
            yield

    fake.replies = [count_body(3)]
    hook = make_hook(max_retries=3)
    hook.limiter = PausedLimiter()  # type: ignore[assignment]

    named = r"^task jobs: GET /api/remote_jobs/count count: source connection 'src'"
    with pytest.raises(SourceError, match=named) as err:
        hook.get_total()

    assert err.value.retriable is True, "Airflow's retries take over"
    assert hook.limiter.requests == 1 and sleeps == [] and fake.requests == [], "no wait, no retry inside the hook"


def deferrable_hook(defer_after_s: float, **source: Any) -> SourceApiHook:
    """A deferrable chunk's hook: waits past ``defer_after_s`` raise instead."""
    cfg = SourceConfig(conn_id="src", **{"backoff_s": 0.5, "max_backoff_s": 2.0, "max_retries": 3, **source})
    return SourceApiHook(cfg, "jobs", "remote_jobs", defer_after_s=defer_after_s)


def test_a_deferrable_hook_defers_a_retry_after_longer_than_defer_after_s_and_waits_a_shorter_one(
    fake, connection, sleeps
):
    from crawler_ops.errors import SourceDeferral

    fake.replies = [httpx.Response(429, headers={"Retry-After": "30"})]
    with pytest.raises(SourceDeferral, match=r"retry would wait 30s, longer than source.defer_after_s \(10s\)") as err:
        deferrable_hook(10).get_total()
    assert err.value.wait_s == 30.0
    assert sleeps == [] and len(fake.requests) == 1, "no wait in the worker"

    fake.requests.clear()
    fake.replies = [httpx.Response(429, headers={"Retry-After": "10"}), count_body(3)]
    assert deferrable_hook(10).get_total() == 3
    assert sleeps == [10.0], "a wait up to defer_after_s is waited"


def test_a_deferrable_hook_waits_for_a_slot_at_most_defer_after_s_and_defers_a_paused_source(fake, connection, sleeps):
    from crawler_ops.errors import SourceDeferral, SourcePausedError

    waits: list[float | None] = []

    class PausedLimiter(RecordingLimiter):
        @contextmanager
        def request(self, max_wait: float | None = None) -> Iterator[None]:
            waits.append(max_wait)
            raise SourcePausedError("no request slot for 3.6e+03s", retriable=True, retry_after=3600.0)
            yield

    hook = deferrable_hook(10)
    hook.limiter = PausedLimiter()  # type: ignore[assignment]
    with pytest.raises(SourceDeferral) as err:
        hook.get_total()

    assert err.value.wait_s == 3600.0 and waits == [10]
    assert sleeps == [] and fake.requests == []


# --------------------------------------------------------------------------- paginators and request templates


def test_a_post_search_sends_the_json_body_and_template_headers_of_its_batch(fake, connection):
    fake.replies = [page_body([{"id": 1}, {"id": 2}])]
    request = {"method": "POST", "path": "/api/{task}/search", "headers": {"X-Task": "{task}"}}
    hook = make_hook(request={**request, "body": {"from": "{offset}", "size": "{limit}", "q": "t={task}"}})

    assert len(hook.get_page(200, 2)) == 2

    (sent,) = fake.requests
    assert (sent.method, sent.url.path, dict(sent.url.params)) == ("POST", "/api/remote_jobs/search", {})
    assert msgspec.json.decode(sent.content) == {"from": 200, "size": 2, "q": "t=remote_jobs"}
    assert sent.headers["x-task"] == "remote_jobs"


def model_pages(total: int, fixed: int | None = None) -> Callable[[httpx.Request], httpx.Response]:
    """A page-numbered source (first page 1) of records 0..total-1, with a page_size parameter or a fixed size."""

    def answer(request: httpx.Request) -> httpx.Response:
        size = fixed or int(request.url.params["page_size"])
        start = (int(request.url.params["page"]) - 1) * size
        return page_body([{"id": i} for i in range(start, min(start + size, total))])

    return answer


def test_a_fixed_page_size_reads_the_page_holding_a_record_and_takes_that_record(fake, connection):
    hook = make_hook(paginator={"type": "page", "size_param": None})
    served = model_pages(2_000, fixed=100)
    fake.replies = [served(httpx.Request("GET", "http://s/?page=13"))]

    (record,) = hook.get_page(1_234, 1)

    assert msgspec.json.decode(record) == {"id": 1_234}
    assert dict(fake.requests[0].url.params) == {"page": "13"}


@pytest.mark.parametrize("fixed", [None, 100], ids=["size-param", "fixed-size"])
def test_without_a_count_endpoint_the_total_is_probed_from_pages(monkeypatch, connection, fixed):
    seen: list[httpx.Request] = []
    served = model_pages(1_234, fixed)
    real_client = httpx.Client

    def transport(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return served(request)

    monkeypatch.setattr(
        httpx, "Client", lambda **kwargs: real_client(**{**kwargs, "transport": httpx.MockTransport(transport)})
    )
    hook = make_hook(count_path=None, paginator={"type": "page", "size_param": None if fixed else "page_size"})

    assert hook.get_total() == 1_234
    assert all(r.url.path == "/api/remote_jobs/list" for r in seen), "no count request"
    assert len(seen) <= 2 * (1_234 // 100 + 1).bit_length() + 2
