"""Per-source rate limits on the real stack: the shared bucket's arithmetic in PostgreSQL, two crawl tasks on one
source connection in four worker processes held to its requests_per_s, a 429 storm that lowers the shared rate for
everyone until it recovers, and the source pools Airflow shows.

Requests are counted where the source sees them: the :class:`tests.support.SourceProxy` in front of the demo source
records when each one arrived. The documented bound (:mod:`crawler_ops.hooks.source.ratelimit`) is
``requests_per_s * (1 + STALE_S) + 1`` requests in any one second of send times; arrival times also carry the
loopback's and the proxy's jitter, for which :data:`JITTER` more are allowed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import plan_run
from crawler_ops.hooks.source.ratelimit import CUT_EVERY_S, HORIZON_S, STALE_S, SourceRateStore
from tests.namespace import unique_name
from tests.support import Forwarded, cli, done_batches, make_task, query, runner_result, spawn_chunk, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
LIMIT = 20.0
#: Requests a second beyond the limiter's own bound, for the jitter of arrival times at the proxy.
JITTER = 2
ALLOWED = math.floor(LIMIT * (1 + STALE_S)) + 1 + JITTER
#: Times are epoch seconds in double precision: about 2e-7 s apart at best.
EPS = 1e-6


def busiest_second(times: Sequence[float]) -> int:
    """The most requests that arrived within any one second (a window starting at each arrival)."""
    ordered = sorted(times)
    most, end = 0, 0
    for start, t in enumerate(ordered):
        while end < len(ordered) and ordered[end] < t + 1.0:
            end += 1
        most = max(most, end - start)
    return most


def arrivals(log: Sequence[Forwarded], since: float = -math.inf, until: float = math.inf) -> list[float]:
    return [r.arrived for r in log if since <= r.arrived < until]


def shared_rate(pg_uri: str, conn_id: str) -> tuple[float, float, int]:
    """The connection's row in crawler_ops.source_rate: (ceiling, current rate, throttles)."""
    ((ceiling, rate, throttles),) = query(
        pg_uri, "SELECT ceiling, rate, throttles FROM crawler_ops.source_rate WHERE source = %s", conn_id
    )
    return ceiling, rate, throttles


@pytest.fixture
def forget_rate_rows(pg_uri: str) -> Iterator[list[str]]:
    sources: list[str] = []
    yield sources
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DELETE FROM crawler_ops.source_rate WHERE source = ANY(%s)", (sources,))


# --------------------------------------------------------------------------- the bucket's arithmetic


operations = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=2, allow_nan=False),  # seconds since the previous operation
        st.one_of(
            st.integers(min_value=1, max_value=12),  # take: slots wanted
            st.sampled_from([None, 0.0, 0.5, 2.0]).map(lambda r: ("throttle", r)),  # 429 with this Retry-After
        ),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    ops=operations,
    ceiling=st.sampled_from([0.5, 3.0, 20.0, 250.0]),
    recovery_s=st.sampled_from([0.5, 4.0, 60.0]),
)
def test_the_shared_bucket_spaces_slots_by_the_rate_halves_on_429_and_grows_back_linearly(
    stack, forget_rate_rows, ops, ceiling, recovery_s
):
    source = SourceConfig(
        conn_id=f"rl_{unique_name()}",
        requests_per_s=ceiling,
        min_requests_per_s=0.2,
        rate_recovery_s=recovery_s,
    )
    forget_rate_rows.append(source.conn_id)
    store = SourceRateStore("crawler_db", source)
    try:
        check_operations(store, ops, ceiling, recovery_s)
    finally:
        store.close()


def check_operations(store: SourceRateStore, ops: list[Any], ceiling: float, recovery_s: float) -> None:
    """Runs ``ops`` on the store at chosen times, checking each answer against the rule."""
    source = store.source
    ((t,),) = store.db.execute("SELECT rate_at FROM crawler_ops.source_rate WHERE source = %s", (source.conn_id,))
    rate, rate_at, cut_at, paused_until, last_slot = ceiling, t, 0.0, t, -math.inf
    floor = min(0.2, ceiling)
    for dt, op in ops:
        t += dt
        grown = min(ceiling, rate + ceiling / recovery_s * max(0.0, t - rate_at))
        if isinstance(op, tuple):
            retry_after = op[1]
            new_rate, cut = store.run(
                "throttle", now=t, retry_after_s=retry_after, cut_every_s=CUT_EVERY_S, floor=0.2, recovery_s=recovery_s
            )
            assert cut == (t - cut_at >= CUT_EVERY_S), "halved at most once a CUT_EVERY_S"
            expected = max(floor, grown / 2) if cut else grown
            assert new_rate == pytest.approx(expected, rel=1e-6)
            paused_until = max(paused_until, t + (retry_after or 0.0))
            rate, rate_at, cut_at = new_rate, max(rate_at, paused_until), (t if cut else cut_at)
            continue
        now, first, interval, granted, new_rate = store.run(
            "take", now=t, want=op, horizon_s=HORIZON_S, recovery_s=recovery_s
        )
        assert now == t and new_rate == pytest.approx(grown, rel=1e-6), "grows by ceiling / recovery_s a second"
        assert floor * (1 - 1e-6) <= new_rate <= ceiling * (1 + 1e-6)
        assert interval == pytest.approx(1 / new_rate)
        assert 1 <= granted <= op
        assert granted == 1 or first + (granted - 1) * interval <= t + HORIZON_S + EPS, "more only within the horizon"
        assert first >= t - EPS, "never a slot in the past: an idle source earns no burst"
        assert first >= paused_until - EPS, "no slot before a Retry-After has passed"
        assert first - last_slot >= 1 / ceiling - EPS, "slots at least 1/requests_per_s apart, whoever took them"
        rate, rate_at, last_slot = new_rate, max(rate_at, t), first + (granted - 1) * interval


def test_a_deleted_pacing_row_starts_again_at_the_configured_rate(stack, pg_uri, forget_rate_rows):
    source = SourceConfig(conn_id=f"rl_{unique_name()}", requests_per_s=5)
    forget_rate_rows.append(source.conn_id)
    store = SourceRateStore("crawler_db", source)
    try:
        store.throttle(None)
        assert shared_rate(pg_uri, source.conn_id)[1] == 2.5
        query(pg_uri, "DELETE FROM crawler_ops.source_rate WHERE source = %s RETURNING source", source.conn_id)

        grant = store.take(3)

        assert (grant.rate, grant.count) == (5, 2), "the configured rate; the slots of the next 0.25 s: now and +0.2 s"
    finally:
        store.close()


@pytest.mark.parametrize(
    "retry_after", [99_999_999_999.0, float("inf"), float("nan"), -5.0], ids=["absurd", "inf", "nan", "negative"]
)
def test_a_hostile_retry_after_cannot_poison_the_shared_row(stack, pg_uri, forget_rate_rows, retry_after):
    source = SourceConfig(conn_id=f"rl_{unique_name()}", requests_per_s=5, max_retry_after_s=60)
    forget_rate_rows.append(source.conn_id)
    store = SourceRateStore("crawler_db", source)
    try:
        ((t,),) = store.db.execute("SELECT rate_at FROM crawler_ops.source_rate WHERE source = %s", (source.conn_id,))
        store.run("throttle", now=t, retry_after_s=retry_after, cut_every_s=CUT_EVERY_S, floor=0.1, recovery_s=60)
        ((next_slot, rate_at),) = query(
            pg_uri, "SELECT next_slot, rate_at FROM crawler_ops.source_rate WHERE source = %s", source.conn_id
        )
        assert t <= next_slot <= t + 60 and t <= rate_at <= t + 60, "paused at most max_retry_after_s"

        _, first, _, granted, _ = store.run("take", now=t + 61, want=3, horizon_s=HORIZON_S, recovery_s=60)

        assert granted >= 1 and first == pytest.approx(t + 61), "a request goes out once the capped pause is over"
    finally:
        store.close()


def test_a_row_poisoned_by_an_older_version_heals_instead_of_failing_every_task(stack, pg_uri, forget_rate_rows):
    """Before the cap, Retry-After: 99999999999 stored a next slot in the year 5195 and take.sql failed with
    'integer out of range' for every task on the connection until someone edited the row."""
    source = SourceConfig(conn_id=f"rl_{unique_name()}", requests_per_s=5, max_retry_after_s=60, deadline_s=20)
    forget_rate_rows.append(source.conn_id)
    store = SourceRateStore("crawler_db", source)
    try:
        store.take(1)
        query(
            pg_uri,
            "UPDATE crawler_ops.source_rate SET next_slot = next_slot + 99999999999, rate_at = rate_at + 99999999999 "
            "WHERE source = %s RETURNING source",
            source.conn_id,
        )

        refused = store.take(3)
        ((next_slot,),) = query(
            pg_uri, "SELECT next_slot FROM crawler_ops.source_rate WHERE source = %s", source.conn_id
        )
        assert refused.count == 0, "no slot beyond the request's deadline is handed out"
        assert refused.first - refused.now <= 60 + 20 + 1e-6 and next_slot <= refused.now + 80 + 1e-6, "healed"

        later = store.run("take", now=refused.now + 81, want=3, horizon_s=HORIZON_S, recovery_s=60)
        assert later[3] >= 1, "and requests flow again once the healed pause is over"
    finally:
        store.close()


# --------------------------------------------------------------------------- on the wire


def limited_task(task_id: str, conn_id: str, **source: Any) -> Any:
    limits = {"requests_per_s": LIMIT, "max_in_flight": 16, "concurrency": 4, "conn_id": conn_id}
    return make_task(task_id, max_chunks=2, min_batches_per_chunk=1, source={**limits, **source})


def plan(cfg: Any, run_id: str) -> list[dict[str, Any]]:
    return plan_run(RunContext(cfg=cfg, run_id=run_id, ref=REF, params=RunParams()))


def test_two_tasks_on_one_source_in_four_processes_never_exceed_its_requests_per_s(
    source, source_proxy, pg_uri, unique_id, forget_rate_rows
):
    forget_rate_rows.append(source_proxy.conn_id)
    tasks = [limited_task(f"{unique_id}_{name}", source_proxy.conn_id) for name in ("a", "b")]
    for cfg in tasks:
        source.create(cfg.id, total=6_000, ref=REF, in_window_share=1.0)
    planned = [(cfg, plan(cfg, "rate-limited")) for cfg in tasks]
    # Pages wait at the proxy until both tasks have asked for one: the four processes start one after another, seconds
    # apart on a loaded machine, and the tasks must crawl together for the shared limit to be what holds them back.
    # Arrival times (what the limit is checked on) are taken before the wait.
    waiting: set[str] = set()

    def first_pages(path: str, params: dict[str, str]) -> bool:
        waiting.update(cfg.id for cfg in tasks if f"/api/{cfg.id}/" in path and "offset" in params)
        return True

    source_proxy.hold(first_pages)
    workers = [spawn_chunk(cfg, "rate-limited", REF, chunk) for cfg, chunks in planned for chunk in chunks]
    assert len(workers) == 4, "two chunks of each task, each in its own process"
    deadline = time.monotonic() + 120
    while len(waiting) < 2:
        assert time.monotonic() < deadline, f"only {sorted(waiting)} asked for a page within 120 s"
        assert all(w.poll() is None for w in workers), "a chunk process ended before the crawl started"
        time.sleep(0.05)
    released = time.monotonic()
    source_proxy.release()
    for worker in workers:
        runner_result(worker)

    log = source_proxy.log
    pages = [r for r in log if r.page and r.page[1] == 100]
    by_task = {cfg.id: [max(r.arrived, released) for r in pages if f"/api/{cfg.id}/" in r.path] for cfg in tasks}
    overlap = min(max(t) for t in by_task.values()) - max(min(t) for t in by_task.values())
    after = [r.arrived for r in pages if r.arrived >= released]
    crawl_s = max(after) - released
    busiest = busiest_second(arrivals(log))
    print(
        f"pages {len(after)} after the release in {crawl_s:.2f}s ({len(after) / crawl_s:.1f}/s), "
        f"both tasks {overlap:.2f}s, "
        f"busiest second {busiest} (allowed {ALLOWED})"
    )
    assert len(pages) == 120, "every page once (no 429 here)"
    assert overlap > 2, "both tasks were crawling pages at the same time"
    assert busiest <= ALLOWED
    assert len(after) / crawl_s >= 0.75 * LIMIT, "the crawl ran at the limit: the limit was what held it back"
    assert shared_rate(pg_uri, source_proxy.conn_id)[:2] == (LIMIT, LIMIT)
    for cfg in tasks:
        assert len(done_batches(pg_uri, cfg.id)) == 60


def test_without_a_rate_limit_the_same_crawl_exceeds_it(source, source_proxy, unique_id):
    """The check above can fail: the demo source, unlimited, takes far more than the limit in a second."""
    cfg = limited_task(unique_id, source_proxy.conn_id, requests_per_s=None)
    source.create(cfg.id, total=12_000, ref=REF, in_window_share=1.0)
    workers = [spawn_chunk(cfg, "unlimited", REF, chunk) for chunk in plan(cfg, "unlimited")]
    for worker in workers:
        runner_result(worker)

    assert busiest_second(arrivals(source_proxy.log)) > 2 * ALLOWED, "the demo source serves pages much faster"


def test_a_429_storm_halves_the_shared_rate_slows_every_request_and_the_rate_recovers(
    source, source_proxy, pg_uri, unique_id, forget_rate_rows
):
    forget_rate_rows.append(source_proxy.conn_id)
    recovery_s = 3.0
    cfg = limited_task(unique_id, source_proxy.conn_id, rate_recovery_s=recovery_s, max_retries=20)
    cfg = cfg.model_copy(update={"max_chunks": 1})
    source.create(cfg.id, total=25_000, ref=REF, in_window_share=1.0)
    (chunk,) = plan(cfg, "storm")
    worker = spawn_chunk(cfg, "storm", REF, chunk)

    def pages_served() -> int:
        return sum(1 for r in source_proxy.log if r.page and r.page[1] == 100 and r.status == 200)

    deadline = time.monotonic() + 120
    while pages_served() < 40:
        assert time.monotonic() < deadline and worker.poll() is None, "the crawl never got going"
        time.sleep(0.05)
    storm_start = time.monotonic()
    source.faults(cfg.id, rate_limit_every=1, retry_after_s=1)  # every page request: 429, Retry-After: 1
    rates = []
    while time.monotonic() < storm_start + 3.0:
        rates.append(shared_rate(pg_uri, source_proxy.conn_id)[1])
        time.sleep(0.1)
    source.clear_faults(cfg.id)
    storm_end = time.monotonic()
    runner_result(worker)
    ceiling, final_rate, throttles = shared_rate(pg_uri, source_proxy.conn_id)

    log = source_proxy.log
    before = arrivals(log, until=storm_start)
    during = arrivals(log, storm_start + 0.5, storm_end)
    after = arrivals(log, storm_end + recovery_s + 1)
    answered_429 = [r for r in log if r.status == 429]
    print(
        f"before the storm: busiest second {busiest_second(before)}; during: {len(during)} requests in "
        f"{storm_end - storm_start - 0.5:.2f}s, {len(answered_429)} answered 429, shared rate down to "
        f"{min(rates):.3g}; "
        f"after recovery: busiest second {busiest_second(after)}, shared rate {final_rate:.3g}, throttles {throttles}"
    )
    assert answered_429 and throttles >= 1
    assert min(rates) <= 0.3 * LIMIT, f"halved at least twice in a 3-second storm: {rates}"
    assert busiest_second(before) >= 0.75 * LIMIT, "before the storm the crawl ran at the limit"
    assert len(during) / (storm_end - storm_start - 0.5) <= LIMIT / 4, "everyone slowed down during the storm"
    assert (ceiling, final_rate) == (LIMIT, LIMIT), "back at requests_per_s after the storm"
    assert after and busiest_second(after) >= 0.75 * LIMIT, "and requests flow at the limit again"
    assert busiest_second(arrivals(log)) <= ALLOWED
    assert len(done_batches(pg_uri, cfg.id)) == 250, "every page crawled, the storm's 429s retried"


# --------------------------------------------------------------------------- Airflow pools


def test_a_crawl_run_starting_creates_or_grows_its_source_pool_and_the_cli_resizes_it(stack, unique_id, use_config):
    from airflow.models.pool import Pool

    from crawler_ops.ops import listener

    conn_id = f"api_{unique_id}"
    name = f"crawler_source_{conn_id}"
    path = use_config(make_task(unique_id, source={"conn_id": conn_id, "max_in_flight": 12}))
    try:
        listener.ensure_pool(f"crawl_{unique_id}")  # what on_dag_run_running starts in a thread
        created = Pool.get_pool(name)
        assert created is not None and created.slots == 12
        assert "steps running on source connection" in (created.description or "")

        path.write_text(path.read_text().replace("max_in_flight: 12", "max_in_flight: 16"))
        listener.ensure_pool(f"crawl_{unique_id}")
        assert Pool.get_pool(name).slots == 16, "a run start grows a pool its tasks would not fit in"

        path.write_text(path.read_text().replace("max_in_flight: 16", "max_in_flight: 5"))
        listener.ensure_pool(f"crawl_{unique_id}")
        assert Pool.get_pool(name).slots == 16, "a run start never shrinks a pool (an operator may have sized it)"

        printed = cli("pools", str(path))
        assert printed.returncode == 0, printed.stderr
        assert f'"{name}"' in printed.stdout and '"slots": 5' in printed.stdout
        applied = cli("pools", str(path), "--apply")
        assert applied.returncode == 0, applied.stderr
        assert Pool.get_pool(name).slots == 5
    finally:
        if Pool.get_pool(name) is not None:
            Pool.delete_pool(name)


def test_dags_test_runs_a_crawl_whose_source_pool_was_never_created(
    source, source_proxy, pg_uri, unique_id, run_dag, forget_rate_rows
):
    """``dag.test()`` (and ``airflow dags test``) run tasks without pools: a new source's pool need not exist."""
    from airflow.models.pool import Pool

    forget_rate_rows.append(source_proxy.conn_id)
    cfg = limited_task(unique_id, source_proxy.conn_id, requests_per_s=200, max_in_flight=4)
    source.create(cfg.id, total=1_000, ref=REF, in_window_share=1.0)
    assert Pool.get_pool(f"crawler_source_{source_proxy.conn_id}") is None

    assert run_dag(cfg, REF) == "success"

    assert watermark(pg_uri, cfg.id) == 1_000
    assert shared_rate(pg_uri, source_proxy.conn_id)[0] == 200
