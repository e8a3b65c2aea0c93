"""The demo source's window filter (dev/demo_source/window.py), in-process: the filtered view is exactly the records
whose true date is in [from, to), in offset order, and its two faults lose rows from the pages or from the count."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo_source.app import create_app
from demo_source.data import TaskConfig, make_record, task_seed, true_date
from demo_source.window import view_offsets, window_of
from tests.dev.test_demo_source import REF, SyncClient

# Dense enough (a record every 16 s, dates jittered by up to 3 minutes) that offsets are out of date order.
CONFIG = TaskConfig(total0=6000, seed=7, ref=REF, window_days=1, in_window_share=0.9, append_step_s=5)
TOTAL = 6200  # 200 appended


@settings(max_examples=150, deadline=None)
@given(start=st.integers(-2 * 86_400, 3600), length=st.integers(0, 86_400))
def test_a_view_is_every_record_dated_in_the_window_in_offset_order(start: int, length: int) -> None:
    low = int(REF.timestamp()) + start
    expected = [o for o in range(TOTAL) if low <= true_date(CONFIG, o).timestamp() < low + length]

    assert view_offsets(CONFIG, TOTAL, low, low + length) == expected


def test_a_window_is_read_in_iso_or_in_shanghai_wall_time() -> None:
    assert window_of({}) is None
    midnight = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())
    window = {"from": "2026-11-01 08:00:00", "to": "2026-11-01T00:00:00.5+00:00"}
    assert window_of(window) == (midnight, midnight + 1), "Shanghai wall time; a fraction rounds up"
    with pytest.raises(ValueError, match="give both"):
        window_of({"from": "2026-11-01"})


@pytest.fixture
def client() -> Iterator[SyncClient]:
    sync_client = SyncClient(create_app(1000, REF))
    yield sync_client
    sync_client.close()


def test_the_view_pages_and_count_and_their_faults(client: SyncClient) -> None:
    window = {"from": (REF - timedelta(days=3)).isoformat(), "to": (REF - timedelta(days=1)).isoformat()}
    body = {"total": 2000, "ref": REF.isoformat(), "in_window_share": 0.5}
    assert client.request("PUT", "/admin/tasks/t", json=body).status_code == 200
    count = client.get("/api/t/count", params=window).json()["data"]["total"]
    records = client.get("/api/t/list", params={"offset": 0, "limit": 1000, **window}).json()["data"]["data"]
    config = TaskConfig(total0=2000, seed=task_seed("t"), ref=REF, in_window_share=0.5, task_id="t")
    low, high = (int((REF - timedelta(days=n)).timestamp()) for n in (3, 1))
    assert [r["id"] for r in records] == [make_record(config, o)["id"] for o in view_offsets(config, 2000, low, high)]
    assert count == len(records) > 100

    faulty = {**body, "window": {"drop_every": 10, "count_short": 5}}
    assert client.request("PUT", "/admin/tasks/t", json=faulty).status_code == 200
    page = client.get("/api/t/list", params={"offset": 0, "limit": 100, **window}).json()["data"]["data"]
    assert len(page) == 90
    assert client.get("/api/t/count", params=window).json()["data"]["total"] == count - 5
    assert client.get("/api/t/count", params={"from": "x", "to": "y"}).status_code == 400
