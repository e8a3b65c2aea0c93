"""A source reporting an absurd total: a run plans only what it takes, in bounded memory, and a total far beyond
the last known one is not planned until an operator confirms it."""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import plan_run
from crawler_ops.errors import SourceError
from tests.support import make_task, query, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
ABSURD = 10**12


def reporting_total(total: int) -> Callable[[str, dict[str, str], bytes], bytes]:
    """Rewrites the count answer of the demo source to ``total``; pages pass unchanged."""

    def rewrite(path: str, params: dict[str, str], body: bytes) -> bytes:
        if not path.endswith("/count"):
            return body
        document = json.loads(body)
        document["data"]["total"] = total
        return json.dumps(document).encode()

    return rewrite


def test_a_dry_run_of_one_batch_plans_the_newest_batch_of_a_total_of_ten_to_the_twelve_in_bounded_memory(
    source, source_proxy, unique_id
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    source_proxy.rewrite = reporting_total(ABSURD)
    cfg = make_task(unique_id, source={"conn_id": source_proxy.conn_id})
    run = RunContext(cfg, "dry", REF, RunParams(dry_run=True, max_batches=1))

    tracemalloc.start()
    started = time.perf_counter()
    chunks = plan_run(run)
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert [chunk.to_xcom()["batches"] for chunk in chunks] == [[[ABSURD - 100, ABSURD]]]
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB"
    assert elapsed < 30, f"{elapsed:.1f}s (one count, a window search of about 13 rounds, PostgreSQL)"


def test_a_total_far_beyond_the_last_known_one_fails_the_plan_until_confirmed(
    source, source_proxy, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, source={"conn_id": source_proxy.conn_id})
    assert run_dag(cfg, REF) == "success"
    source_proxy.rewrite = reporting_total(ABSURD)

    with pytest.raises(SourceError) as err:
        plan_run(RunContext(cfg, "jumped", REF, RunParams()))

    assert f"task {unique_id}: the source total jumped from 300 to {ABSURD}" in str(err.value)
    assert f'{{"confirm_total": {ABSURD}}}' in str(err.value) and err.value.retriable is False
    rows_above = query(
        pg_uri, "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND id >= 300", unique_id
    )
    assert rows_above == [(0,)], "nothing planned"
    confirmed = plan_run(
        RunContext(cfg, "confirmed", REF, RunParams(dry_run=True, max_batches=2, confirm_total=ABSURD))
    )
    assert [chunk.to_xcom()["batches"] for chunk in confirmed] == [
        [[ABSURD - 100, ABSURD], [ABSURD - 200, ABSURD - 100]]
    ]
    assert watermark(pg_uri, unique_id) == 300
