"""Tests of the demo job postings source: pure data model and ASGI app.

The app is exercised in-process through :class:`httpx.ASGITransport`; no
network is used. Run with ``PYTHONPATH=dev``.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable, Iterator, MutableMapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, NoReturn

import httpx
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo_source import runtime as runtime_module
from demo_source.__main__ import parse_args
from demo_source.app import DemoSource, create_app
from demo_source.data import (
    BAD_DATE,
    Faults,
    TaskConfig,
    TaskState,
    ground_truth,
    make_page,
    make_record,
    task_seed,
    true_date,
)

REF = datetime(2026, 11, 20, tzinfo=UTC)
SHANGHAI = timezone(timedelta(hours=8))
MINUTE = timedelta(minutes=1)
NO_FAULTS_JSON = msgspec.json.decode(msgspec.json.encode(Faults()))
RECORD_KEYS = [
    "id",
    "aae397",
    "Collect_time",
    "title",
    "company",
    "city",
    "salary",
    "education",
    "description",
]


class SyncClient:
    """Synchronous facade over an ``httpx.AsyncClient`` bound to an ASGI app."""

    def __init__(self, app: DemoSource) -> None:
        """Bind a client to ``app``.

        :param app: the ASGI application under test.
        """
        self._runner = asyncio.Runner()
        transport = httpx.ASGITransport(app=app)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://demo")

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """Send one request and wait for the response.

        :param method: HTTP method.
        :param url: path and query.
        :param kwargs: passed to :meth:`httpx.AsyncClient.request`.
        :return: the response.
        """
        return self._runner.run(self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        """Send a GET request.

        :param url: path and query.
        :param kwargs: passed to :meth:`request`.
        :return: the response.
        """
        return self.request("GET", url, **kwargs)

    def close(self) -> None:
        """Close the client and its event loop."""
        self._runner.run(self._client.aclose())
        self._runner.close()


def config(total0: int = 1000, **kwargs: Any) -> TaskConfig:
    """Build a task configuration around :data:`REF`.

    :param total0: initial record count.
    :param kwargs: other :class:`TaskConfig` fields.
    :return: the configuration.
    """
    kwargs.setdefault("seed", 7)
    kwargs.setdefault("ref", REF)
    return TaskConfig(total0=total0, **kwargs)


def parse_local(text: str, fmt: str = "%Y-%m-%d %H:%M:%S") -> datetime:
    """Parse a naive Asia/Shanghai time string into aware UTC.

    :param text: the local time text.
    :param fmt: its strptime format.
    :return: the UTC time.
    """
    return datetime.strptime(text, fmt).replace(tzinfo=SHANGHAI).astimezone(UTC)


def record_date(record: dict[str, str]) -> datetime | None:
    """Read a record's publication date the way a crawler would.

    :param record: a served record.
    :return: ``aae397`` if valid, else ``Collect_time`` if present, else ``None``.
    """
    text = record.get("aae397")
    if text is not None:
        try:
            return parse_local(text)
        except ValueError:
            return None
    collected = record.get("Collect_time")
    return None if collected is None else datetime.fromisoformat(collected)


@pytest.fixture
def source() -> DemoSource:
    """Return a fresh app whose unseen tasks hold 1000 records."""
    return create_app(1000, REF)


@pytest.fixture
def client(source: DemoSource) -> Iterator[SyncClient]:
    """Return a client talking to :func:`source` in-process."""
    sync_client = SyncClient(source)
    yield sync_client
    sync_client.close()


def put_task(client: SyncClient, task: str = "t", **body: Any) -> httpx.Response:
    """(Re)create a task; ``total`` defaults to 1000 and ``ref`` to :data:`REF`.

    :param client: the test client.
    :param task: task id.
    :param body: fields of the PUT body.
    :return: the response.
    """
    body.setdefault("total", 1000)
    body.setdefault("ref", REF.isoformat())
    return client.request("PUT", f"/admin/tasks/{task}", json=body)


def put_faults(client: SyncClient, task: str = "t", **faults: Any) -> httpx.Response:
    """Replace a task's fault set.

    :param client: the test client.
    :param task: task id.
    :param faults: the fault fields.
    :return: the response.
    """
    return client.request("PUT", f"/admin/tasks/{task}/faults", json=faults)


def list_page(client: SyncClient, offset: int, limit: int, task: str = "t") -> httpx.Response:
    """Request one list page.

    :param client: the test client.
    :param offset: first offset.
    :param limit: page size.
    :param task: task id.
    :return: the response.
    """
    return client.get(f"/api/{task}/list", params={"offset": offset, "limit": limit})


def drain(client: SyncClient, task: str = "t", limit: int = 1000) -> list[dict[str, str]]:
    """Read every record of a task in offset order.

    :param client: the test client.
    :param task: task id.
    :param limit: page size.
    :return: all records.
    """
    records: list[dict[str, str]] = []
    while True:
        response = list_page(client, len(records), limit, task)
        assert response.status_code == 200
        page = response.json()["data"]["data"]
        if not page:
            return records
        records.extend(page)


# --- pure data model ---------------------------------------------------------


def test_same_config_generates_identical_records() -> None:
    assert make_page(config(), 0, 50) == make_page(config(), 0, 50)


@pytest.mark.parametrize(
    "other",
    [config(seed=8), config(task_id="other")],
    ids=["different-seed", "different-task-id"],
)
def test_ids_differ_when_seed_or_task_differs(other: TaskConfig) -> None:
    ids = {make_record(config(), offset)["id"] for offset in range(200)}
    other_ids = {make_record(other, offset)["id"] for offset in range(200)}
    assert not ids & other_ids


def test_ids_are_unique_16_hex_chars() -> None:
    ids = [record["id"] for record in make_page(config(5000), 0, 5100)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch("[0-9a-f]{16}", value) for value in ids)


def test_record_has_expected_fields_and_size() -> None:
    records = make_page(config(), 0, 200)
    sizes = [len(msgspec.json.encode(record)) for record in records]
    assert all(list(record) == RECORD_KEYS for record in records)
    assert 1500 <= sum(sizes) / len(sizes) <= 1900
    assert any("工程师" in record["title"] for record in records)
    assert all(record["company"].endswith("有限公司") for record in records)
    assert all(record["company"].startswith(record["city"]) for record in records)
    assert all("K" in record["salary"] for record in records)


@pytest.mark.parametrize(
    ("total0", "share"),
    [(1000, 0.3), (997, 0.3), (10, 0.05), (500, 0.0), (300, 1.0), (1, 0.3)],
    ids=["round-share", "odd-total", "tiny-share", "no-window", "all-window", "single"],
)
def test_window_membership_is_exact_by_construction(total0: int, share: float) -> None:
    cfg = config(total0, in_window_share=share, window_days=5, history_days=40)
    window_low = REF - timedelta(days=5) + MINUTE
    dates = [true_date(cfg, offset) for offset in range(total0)]
    inside = [d for d in dates if window_low < d < REF - MINUTE]
    older = [d for d in dates if REF - timedelta(days=40) <= d < window_low - 2 * MINUTE]
    assert len(inside) == round(share * total0)
    assert len(inside) + len(older) == total0
    assert all(d < window_low for d in dates[: total0 - len(inside)])


def test_dates_are_roughly_time_ordered() -> None:
    cfg = config(2000, window_days=1, history_days=2)
    dates = [true_date(cfg, offset) for offset in range(2000)]
    inversions = sum(1 for a, b in itertools.pairwise(dates) if b < a)
    assert dates[0] < dates[999] < dates[1999]
    assert all(b - a >= -timedelta(minutes=6) for a, b in itertools.pairwise(dates))
    assert 0 < inversions < 1000


def test_appended_records_step_after_ref() -> None:
    cfg = config(100, append_step_s=30)
    assert [true_date(cfg, 100 + k) for k in range(3)] == [REF + timedelta(seconds=30 * (k + 1)) for k in range(3)]


@settings(max_examples=60, deadline=None, database=None)
@given(
    offset=st.integers(min_value=0, max_value=5000),
    seed=st.integers(min_value=0, max_value=2**63),
    hour=st.integers(min_value=0, max_value=23),
)
def test_aae397_renders_true_date_in_utc8(offset: int, seed: int, hour: int) -> None:
    cfg = config(3000, seed=seed, ref=REF + timedelta(hours=hour))
    record = make_record(cfg, offset)
    published = true_date(cfg, offset)
    collected = datetime.fromisoformat(record["Collect_time"])
    assert published.microsecond == 0
    assert parse_local(record["aae397"]) == published
    assert record["Collect_time"].endswith("+08:00")
    assert MINUTE <= collected - published <= timedelta(minutes=15)


@pytest.mark.parametrize(
    ("faults", "expect_aae397", "expect_collect"),
    [
        (Faults(bad_date_share=1.0), BAD_DATE, False),
        (Faults(fallback_share=1.0), None, True),
    ],
    ids=["bad-date-has-no-collect-time", "fallback-has-only-collect-time"],
)
def test_record_level_faults_shape_dates(faults: Faults, expect_aae397: str | None, expect_collect: bool) -> None:
    for record in make_page(config(), 0, 100, faults):
        assert record.get("aae397") == expect_aae397
        assert ("Collect_time" in record) is expect_collect


def test_record_level_fault_shares_are_deterministic_and_disjoint() -> None:
    faults = Faults(bad_date_share=0.2, fallback_share=0.3)
    records = make_page(config(4000), 0, 4000, faults)
    bad = sum(1 for r in records if r.get("aae397") == BAD_DATE)
    fallback = sum(1 for r in records if "aae397" not in r)
    assert records == make_page(config(4000), 0, 4000, faults)
    assert abs(bad / 4000 - 0.2) < 0.03
    assert abs(fallback / 4000 - 0.3) < 0.03


def test_overlapping_fault_shares_are_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"bad_date_share": 0.6, "fallback_share": 0.5}, Faults)


def test_ground_truth_matches_scan_of_true_dates() -> None:
    cfg = config(600)
    ref = REF - timedelta(days=2)
    truth = ground_truth(cfg, 600, ref, 3)
    expected = sorted(
        make_record(cfg, offset)["id"]
        for offset in range(600)
        if ref - timedelta(days=3) <= true_date(cfg, offset) <= ref
    )
    assert truth["in_window_ids"] == expected
    assert truth["in_window_count"] == len(expected) > 0
    assert truth["bad_date_ids"] == []


def test_ground_truth_tolerance_admits_appended_records() -> None:
    cfg = config(100, append_step_s=60)
    exact = ground_truth(cfg, 110, REF, 7)
    tolerant = ground_truth(cfg, 110, REF, 7, tolerance_s=180)
    assert exact["in_window_count"] == 30
    assert tolerant["in_window_count"] == 33


def test_ground_truth_excludes_bad_dates_and_counts_fallbacks() -> None:
    cfg = config(1000)
    faults = Faults(bad_date_share=0.3, fallback_share=0.3)
    truth = ground_truth(cfg, 1000, REF, 7, faults=faults)
    clean = ground_truth(cfg, 1000, REF, 7)
    records = make_page(cfg, 0, 1000, faults)
    bad = sorted(r["id"] for r in records if r.get("aae397") == BAD_DATE)
    assert truth["bad_date_ids"] == bad
    assert truth["in_window_ids"] == sorted(set(clean["in_window_ids"]) - set(bad))
    assert clean["in_window_count"] == 300


@pytest.mark.parametrize(
    "kwargs",
    [
        {"total0": -1},
        {"window_days": 0},
        {"history_days": 7},
        {"in_window_share": 1.5},
        {"append_step_s": 0},
        {"ref": datetime(2026, 11, 20)},
    ],
    ids=[
        "negative-total",
        "zero-window",
        "history-not-longer",
        "share-above-one",
        "zero-step",
        "naive-ref",
    ],
)
def test_invalid_task_config_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must"):
        config(**kwargs)


def test_ref_is_normalised_to_utc_seconds() -> None:
    ref = datetime(2026, 11, 20, 8, 0, 0, 123, tzinfo=SHANGHAI)
    assert config(ref=ref).ref == REF


def test_task_state_appends_and_truncates() -> None:
    state = TaskState(config(100))
    assert state.append(5) == 105
    assert state.truncate(40) == 40
    with pytest.raises(ValueError, match="total"):
        state.truncate(41)


# --- HTTP API ----------------------------------------------------------------


def test_healthz_answers_ok(client: SyncClient) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nope", 404),
        ("GET", "/api/t/unknown", 404),
        ("GET", "/admin/tasks/t/append/extra", 404),
        ("POST", "/healthz", 405),
        ("DELETE", "/api/t/list", 405),
    ],
    ids=["unknown-root", "unknown-api-verb", "too-deep", "wrong-method", "delete-list"],
)
def test_unknown_routes_answer_json_errors(client: SyncClient, method: str, path: str, status: int) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.json()["code"] == status
    assert response.headers["content-type"] == "application/json"


def test_unseen_task_gets_default_config(client: SyncClient) -> None:
    count = client.get("/api/fresh/count").json()
    state = client.get("/admin/tasks/fresh").json()
    assert count == {"code": 0, "msg": "ok", "data": {"total": 1000}}
    assert state["config"]["seed"] == task_seed("fresh")
    assert state["config"]["ref"] == "2026-11-20T00:00:00+00:00"


def test_default_ref_is_todays_utc_midnight() -> None:
    ref = create_app(10, None).default_ref
    assert ref == datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.mark.parametrize(
    ("offset", "limit", "expected"),
    [
        (0, 10, range(10)),
        (995, 10, range(995, 1000)),
        (1000, 10, range(0)),
        (5000, 1, range(0)),
    ],
    ids=[
        "first-page",
        "last-partial-page",
        "offset-at-total-is-empty",
        "offset-past-total-is-empty",
    ],
)
def test_list_serves_records_in_offset_order(client: SyncClient, offset: int, limit: int, expected: range) -> None:
    put_task(client, seed=3)
    body = list_page(client, offset, limit).json()
    cfg = config(1000, seed=3, task_id="t")
    assert body["code"] == 0
    assert body["data"]["total"] == 1000
    assert body["data"]["data"] == [make_record(cfg, o) for o in expected]


@pytest.mark.parametrize(
    "query",
    [
        "offset=0&limit=0",
        "offset=0&limit=1001",
        "offset=-1&limit=5",
        "offset=x&limit=5",
        "offset=0&limit=1.5",
    ],
    ids=[
        "limit-zero",
        "limit-above-1000",
        "negative-offset",
        "non-integer-offset",
        "non-integer-limit",
    ],
)
def test_invalid_paging_answers_400(client: SyncClient, query: str) -> None:
    response = client.get(f"/api/t/list?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == 400


def test_drained_pages_equal_the_whole_data_set(client: SyncClient) -> None:
    put_task(client, total=2500)
    records = drain(client, limit=700)
    assert records == make_page(config(2500, seed=task_seed("t"), task_id="t"), 0, 2500)


def test_put_task_reports_config_and_resets_state(client: SyncClient) -> None:
    put_faults(client, error_rate=1.0)
    list_page(client, 0, 1)
    state = put_task(client, total=42, seed=9, ref="2026-01-02T03:04:05+08:00", window_days=3).json()
    assert state["config"]["ref"] == "2026-01-01T19:04:05+00:00"
    assert (
        state["total"],
        state["config"]["seed"],
        state["config"]["window_days"],
    ) == (42, 9, 3)
    assert state["faults"] == NO_FAULTS_JSON
    assert client.get("/admin/tasks/t/requests").json()["requests"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"seed": 1},
        {"total": 5, "bogus": 1},
        {"total": 5, "history_days": 3},
        {"total": 5, "ref": "yesterday"},
    ],
    ids=["missing-total", "unknown-field", "inconsistent-days", "bad-ref"],
)
def test_put_task_rejects_invalid_bodies(client: SyncClient, body: dict[str, Any]) -> None:
    response = client.request("PUT", "/admin/tasks/t", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == 400


def test_append_grows_source_with_newer_records(client: SyncClient) -> None:
    put_task(client, total=10, append_step_s=60)
    assert client.request("POST", "/admin/tasks/t/append", json={"n": 3}).json() == {"total": 13}
    records = list_page(client, 10, 10).json()["data"]["data"]
    dates = [record_date(record) for record in records]
    assert dates == [REF + timedelta(minutes=k) for k in (1, 2, 3)]


def test_truncate_shrinks_source_and_rejects_growth(client: SyncClient) -> None:
    put_task(client, total=100)
    list_page(client, 0, 100)
    assert client.request("POST", "/admin/tasks/t/truncate", json={"total": 40}).json() == {"total": 40}
    body = list_page(client, 0, 100).json()["data"]
    assert (body["total"], len(body["data"])) == (40, 40)
    grow = client.request("POST", "/admin/tasks/t/truncate", json={"total": 41})
    assert grow.status_code == 400


@pytest.mark.parametrize(
    ("faults", "status"),
    [({"error_rate": 1.0}, 500), ({"error_rate": 1.0, "error_status": 503}, 503)],
    ids=["default-status", "custom-status"],
)
def test_error_rate_fails_list_and_count(client: SyncClient, faults: dict[str, Any], status: int) -> None:
    put_faults(client, **faults)
    assert list_page(client, 0, 5).status_code == status
    count = client.get("/api/t/count")
    assert (count.status_code, count.json()["code"]) == (status, status)


def test_partial_error_rate_is_reproducible(client: SyncClient) -> None:
    def statuses() -> list[int]:
        put_faults(client, error_rate=0.5)
        return [list_page(client, 0, 1).status_code for _ in range(40)]

    first = statuses()
    assert first == statuses()
    assert {200, 500} == set(first)


def test_latency_delays_responses(client: SyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(delay)

    monkeypatch.setattr(asyncio, "sleep", recorded_sleep)
    put_faults(client, latency_ms=40)
    assert list_page(client, 0, 1).status_code == 200
    assert client.get("/api/t/count").status_code == 200
    assert waits == [0.04, 0.04]


def test_rate_limit_answers_every_nth_list_request_with_429(client: SyncClient) -> None:
    put_faults(client, rate_limit_every=3, retry_after_s=2)
    responses = [list_page(client, 0, 1) for _ in range(6)]
    assert [r.status_code for r in responses] == [200, 200, 429, 200, 200, 429]
    assert responses[2].headers["retry-after"] == "2"
    assert responses[2].json() == {"code": 429, "msg": "rate limited"}


def test_malformed_rate_returns_invalid_json_with_200(client: SyncClient) -> None:
    put_faults(client, malformed_rate=1.0)
    response = list_page(client, 0, 5)
    assert response.status_code == 200
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(response.content)


def test_wrong_shape_moves_records_to_items(client: SyncClient) -> None:
    put_faults(client, wrong_shape=True)
    body = list_page(client, 0, 5).json()
    assert body["code"] == 0
    assert list(body["data"]) == ["items"]
    assert len(body["data"]["items"]) == 5


@pytest.mark.parametrize(
    ("faults", "check"),
    [
        (
            {"bad_date_share": 1.0},
            lambda r: r["aae397"] == BAD_DATE and "Collect_time" not in r,
        ),
        ({"fallback_share": 1.0}, lambda r: "aae397" not in r and "Collect_time" in r),
    ],
    ids=["bad-date", "fallback"],
)
def test_record_faults_replace_previously_served_pages(
    client: SyncClient, faults: dict[str, Any], check: Callable[[dict[str, str]], bool]
) -> None:
    before = list_page(client, 0, 20).json()["data"]["data"]
    put_faults(client, **faults)
    after = list_page(client, 0, 20).json()["data"]["data"]
    assert all(check(record) for record in after)
    assert [r["id"] for r in after] == [r["id"] for r in before]


@pytest.mark.parametrize(
    ("offset", "limit", "status"),
    [(100, 100, 502), (150, 1, 502), (149, 1, 200), (151, 100, 200), (100, 50, 200)],
    ids=[
        "page-containing",
        "exact-offset",
        "just-before",
        "just-after",
        "range-end-exclusive",
    ],
)
def test_fail_offsets_fail_every_covering_request(client: SyncClient, offset: int, limit: int, status: int) -> None:
    put_faults(client, fail_offsets=[150, 900], fail_status=502)
    assert [list_page(client, offset, limit).status_code for _ in range(2)] == [status] * 2


def test_fail_offsets_beyond_total_are_ignored(client: SyncClient) -> None:
    put_faults(client, fail_offsets=[1005])
    assert list_page(client, 950, 100).status_code == 200


@pytest.mark.parametrize(
    ("offset", "limit", "served"),
    [(0, 10, 9), (995, 10, 5), (0, 1, 0)],
    ids=["full-page-loses-last", "partial-page-untouched", "single-record-page-empty"],
)
def test_short_pages_drop_last_record_of_full_pages(client: SyncClient, offset: int, limit: int, served: int) -> None:
    put_faults(client, short_pages=True)
    body = list_page(client, offset, limit).json()["data"]
    assert len(body["data"]) == served
    assert [r["id"] for r in body["data"]] == [
        make_record(config(1000, seed=task_seed("t"), task_id="t"), o)["id"] for o in range(offset, offset + served)
    ]


def test_delete_faults_restores_normal_service(client: SyncClient) -> None:
    put_faults(client, error_rate=1.0, wrong_shape=True)
    client.request("DELETE", "/admin/tasks/t/faults")
    assert client.get("/admin/tasks/t/faults").json() == NO_FAULTS_JSON
    assert len(list_page(client, 0, 3).json()["data"]["data"]) == 3


@pytest.mark.parametrize(
    "faults",
    [{"error_rate": 2}, {"bogus": True}, {"fail_offsets": [-1]}, {"error_status": 200}],
    ids=["rate-above-one", "unknown-field", "negative-offset", "non-error-status"],
)
def test_invalid_faults_are_rejected(client: SyncClient, faults: dict[str, Any]) -> None:
    assert put_faults(client, **faults).status_code == 400


def test_request_log_records_every_list_request(client: SyncClient) -> None:
    put_faults(client, rate_limit_every=2)
    for offset in (0, 10, 20):
        list_page(client, offset, 10)
    client.get("/api/t/list?offset=bad")
    log = client.get("/admin/tasks/t/requests").json()
    assert log["requests"] == [
        {"offset": 0, "limit": 10, "status": 200},
        {"offset": 10, "limit": 10, "status": 429},
        {"offset": 20, "limit": 10, "status": 200},
        {"offset": None, "limit": None, "status": 400},
    ]
    counters = client.get("/admin/tasks/t").json()["requests"]
    assert (counters["list"], counters["list_200"], counters["list_429"]) == (4, 2, 1)


def test_request_log_clears_on_delete(client: SyncClient) -> None:
    list_page(client, 0, 1)
    assert client.request("DELETE", "/admin/tasks/t/requests").json() == {"cleared": 1}
    assert client.get("/admin/tasks/t/requests").json() == {
        "requests": [],
        "count": 0,
        "dropped": 0,
    }


def test_in_flight_counts_the_data_requests_being_answered_and_keeps_their_peak(source: DemoSource) -> None:
    async def three_at_once_then_one() -> list[dict[str, int]]:
        transport = httpx.ASGITransport(app=source)
        async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
            await client.put("/admin/tasks/t/faults", json={"latency_ms": 50})
            pages = [client.get("/api/t/list", params={"offset": i, "limit": 1}) for i in range(2)]
            answers = await asyncio.gather(*pages, client.get("/api/t/count"))
            assert [r.status_code for r in answers] == [200, 200, 200]
            seen = [(await client.get("/admin/tasks/t/in_flight")).json()]
            await client.delete("/admin/tasks/t/requests")
            seen.append((await client.get("/admin/tasks/t/in_flight")).json())
            await client.get("/api/t/list", params={"offset": 0, "limit": 1})
            seen.append((await client.get("/admin/tasks/t/in_flight")).json())
            return seen

    after_three, after_clear, after_one = asyncio.run(three_at_once_then_one())

    assert after_three == {"in_flight": 0, "peak": 3}, "list and count requests overlapped in their latency"
    assert after_clear == {"in_flight": 0, "peak": 0}, "clearing the request log starts a new peak"
    assert after_one == {"in_flight": 0, "peak": 1}


def test_request_log_only_counts_past_its_cap(client: SyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_module, "REQUEST_LOG_CAP", 3)
    for _ in range(5):
        list_page(client, 0, 1)
    log = client.get("/admin/tasks/t/requests").json()
    assert (len(log["requests"]), log["count"], log["dropped"]) == (3, 5, 2)


@pytest.mark.parametrize(
    ("faults", "query"),
    [
        ({}, "days=7"),
        ({}, "days=2&ref=2026-11-18T12:00:00Z"),
        ({"bad_date_share": 0.2, "fallback_share": 0.2}, "days=7"),
        ({"fallback_share": 0.5}, "days=7&tolerance_s=600"),
    ],
    ids=[
        "default-window",
        "earlier-ref",
        "bad-and-fallback-dates",
        "tolerance-covers-appended",
    ],
)
def test_truth_agrees_with_dates_parsed_from_served_records(
    client: SyncClient, faults: dict[str, Any], query: str
) -> None:
    put_task(client, total=1500)
    client.request("POST", "/admin/tasks/t/append", json={"n": 20})
    put_faults(client, **faults)
    truth = client.get(f"/admin/tasks/t/truth?{query}").json()
    params = dict(part.split("=") for part in query.split("&"))
    ref = datetime.fromisoformat(params.get("ref", REF.isoformat()))
    low = ref - timedelta(days=float(params["days"]))
    high = ref + timedelta(seconds=float(params.get("tolerance_s", 0)))
    records = drain(client)
    parsed = {r["id"]: record_date(r) for r in records}
    assert truth["in_window_ids"] == sorted(i for i, d in parsed.items() if d and low <= d <= high)
    assert truth["bad_date_ids"] == sorted(i for i, d in parsed.items() if d is None)
    assert (truth["total"], truth["in_window_count"]) == (
        1520,
        len(truth["in_window_ids"]),
    )


@pytest.mark.parametrize(
    "query",
    ["days=-1", "days=abc", "ref=someday", "tolerance_s=x"],
    ids=["negative-days", "non-numeric-days", "bad-ref", "bad-tolerance"],
)
def test_truth_rejects_invalid_parameters(client: SyncClient, query: str) -> None:
    assert client.get(f"/admin/tasks/t/truth?{query}").status_code == 400


def test_admin_lists_known_tasks(client: SyncClient) -> None:
    put_task(client, "b")
    client.get("/api/a/count")
    assert client.get("/admin/tasks").json() == {"tasks": ["a", "b"]}


def test_lifespan_events_are_acknowledged(source: DemoSource) -> None:
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return incoming.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(source({"type": "lifespan"}, receive, send))
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


def test_cli_parses_defaults_and_iso_ref() -> None:
    args = parse_args(["--port", "1234", "--default-ref", "2026-11-20T08:00:00+08:00"])
    assert (args.host, args.port, args.default_total) == ("127.0.0.1", 1234, 10_000)
    assert args.default_ref == REF


def test_unexpected_handler_error_answers_json_500(source: DemoSource) -> None:
    async def broken(request: object) -> NoReturn:
        raise RuntimeError(request)

    source._routes[("healthz",)]["GET"] = broken
    sync_client = SyncClient(source)
    try:
        response = sync_client.get("/healthz")
    finally:
        sync_client.close()
    assert response.status_code == 500
    assert response.json() == {"code": 500, "msg": "internal error: RuntimeError"}


ADMIN_CALLS = [
    ("GET", "/admin/tasks", None),
    ("GET", "/admin/tasks/t", None),
    ("PUT", "/admin/tasks/t", {"total": 10, "ref": REF.isoformat()}),
    ("POST", "/admin/tasks/t/append", {"n": 1}),
    ("PUT", "/admin/tasks/t/faults", {"error_rate": 0.0}),
    ("GET", "/admin/tasks/t/requests", None),
    ("DELETE", "/admin/tasks/t/requests", None),
    ("GET", "/admin/tasks/t/in_flight", None),
    ("GET", "/admin/tasks/t/truth?ref=2026-11-20T00:00:00%2B00:00&days=1", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_CALLS, ids=[f"{m} {p}" for m, p, _ in ADMIN_CALLS])
def test_with_an_admin_token_the_admin_api_refuses_requests_without_it(method, path, body):
    client = SyncClient(create_app(1000, REF, admin_token="s3cret-token"))
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"}):
            refused = client.request(method, path, json=body, headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"] == "Bearer"
        accepted = client.request(method, path, json=body, headers={"Authorization": "Bearer s3cret-token"})
        assert accepted.status_code == 200, accepted.text
    finally:
        client.close()


def test_with_an_admin_token_the_data_api_and_the_health_check_stay_open():
    client = SyncClient(create_app(1000, REF, admin_token="s3cret-token"))
    try:
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/t/count").status_code == 200
        assert client.get("/api/t/list?offset=0&limit=5").status_code == 200
    finally:
        client.close()


def test_the_admin_token_comes_from_the_environment_not_the_command_line(monkeypatch):
    monkeypatch.setenv("DEMO_SOURCE_ADMIN_TOKEN", "from-env")
    assert parse_args([]).admin_token == "from-env"
    monkeypatch.delenv("DEMO_SOURCE_ADMIN_TOKEN")
    assert parse_args([]).admin_token is None


def test_record_faults_set_and_drop_fields() -> None:
    cfg = config(total0=10)
    faults = msgspec.convert({"set_fields": {"remote": True, "salary": 12000}, "drop_fields": ["education"]}, Faults)

    record = make_record(cfg, 3, faults)

    assert record["remote"] is True and record["salary"] == 12000 and "education" not in record
    assert record["id"] == make_record(cfg, 3)["id"], "the rest of the record is unchanged"
