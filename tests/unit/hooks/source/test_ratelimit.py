"""Unit tests of crawler_ops.hooks.source.ratelimit without PostgreSQL: how one process turns grants of slots into send
times, drops stale slots, bounds requests in flight and reacts to a 429 (where the source hook calls it: the end of
test_source.py). The shared bucket's own arithmetic (the SQL) is tested on PostgreSQL in
tests/integration/test_rate_limits.py."""

from __future__ import annotations

import itertools
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourcePausedError
from crawler_ops.hooks.source import ratelimit
from crawler_ops.hooks.source.ratelimit import STALE_S, Grant, SourceLimiter, limiter_for
from tests.waiting import wait_until

finite = st.floats(min_value=0, max_value=1e4, allow_nan=False)


@given(
    now=finite,
    lead=st.floats(min_value=-5, max_value=5, allow_nan=False),
    interval=st.floats(min_value=1e-4, max_value=10, allow_nan=False),
    count=st.integers(min_value=1, max_value=300),
    received=finite,
)
def test_local_send_times_keep_the_grants_spacing_and_are_never_before_its_arrival(
    now, lead, interval, count, received
):
    times = Grant(now, now + lead, interval, count, 1 / interval).local_times(received)

    assert len(times) == count
    assert all(t >= received for t in times), "a slot already due is due on arrival, not in the past"
    assert times == sorted(times)
    for i, t in enumerate(times):
        assert t == pytest.approx(received + max(0.0, now + lead + i * interval - now), abs=1e-6)


@dataclass
class Clock:
    """Simulated time: ``sleep`` moves it on."""

    t: float = 100.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


@dataclass
class Bucket:
    """Hands out slots ``interval`` apart from ``next`` on, ``count`` per take, on the same clock as the limiter."""

    clock: Clock
    interval: float = 0.05
    count: int = 5
    next: float = 0.0
    takes: list[int] = field(default_factory=list)
    throttles: list[float | None] = field(default_factory=list)
    closed: int = 0

    def take(self, want: int) -> Grant:
        self.takes.append(want)
        first = max(self.next, self.clock())
        self.next = first + self.count * self.interval
        return Grant(self.clock(), first, self.interval, self.count, 1 / self.interval)

    def throttle(self, retry_after: float | None) -> tuple[float, bool]:
        self.throttles.append(retry_after)
        return 10.0, True

    def close(self) -> None:
        self.closed += 1


def limited(clock: Clock, bucket: Bucket | None, **limits: Any) -> SourceLimiter:
    source = SourceConfig(conn_id="src", **{"requests_per_s": 20, **limits})
    return SourceLimiter(source, bucket, clock=clock, sleep=clock.sleep)


def test_requests_are_sent_at_the_slots_of_one_grant_then_of_the_next():
    clock = Clock()
    bucket = Bucket(clock)
    limiter = limited(clock, bucket)
    sent = []
    for _ in range(12):
        with limiter.request():
            sent.append(clock())

    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert gaps == pytest.approx([0.05] * 11)
    assert len(bucket.takes) == 3, "one round trip per grant of five slots"
    assert bucket.takes[0] == 6, "asks for the slots of HORIZON_S at requests_per_s (5), plus one"


def test_a_slot_found_stale_is_dropped_and_never_used_late():
    clock = Clock()
    bucket = Bucket(clock, count=3)
    limiter = limited(clock, bucket)
    with limiter.request():
        first = clock()
    clock.t += 0.05 + STALE_S + 0.01  # the second slot is stale, the third is not
    with limiter.request():
        second = clock()

    assert second - first == pytest.approx(0.05 + STALE_S + 0.01), "sent at once, on the third slot (still fresh)"
    assert len(bucket.takes) == 1 and not limiter.slots, "the second slot was dropped, the third used"


@given(st.lists(st.floats(min_value=0, max_value=0.5, allow_nan=False), min_size=1, max_size=40))
def test_whatever_the_delays_between_requests_none_is_sent_before_or_long_after_its_slot(delays):
    clock = Clock()
    bucket = Bucket(clock, interval=0.05, count=4)
    granted: list[float] = []
    real_take = bucket.take

    def recording_take(want: int) -> Grant:
        grant = real_take(want)
        granted.extend(grant.local_times(clock()))
        return grant

    bucket.take = recording_take  # type: ignore[method-assign]
    limiter = limited(clock, bucket)
    sent = []
    for delay in delays:
        clock.t += delay
        with limiter.request():
            sent.append(clock())

    assert all(any(0 <= s - g <= STALE_S for g in granted) for s in sent), "each send within STALE_S of a slot"
    assert sent == sorted(sent)
    busiest = max(sum(1 for t in sent if s <= t < s + 1) for s in sent)
    assert busiest <= 20 * (1 + STALE_S) + 1, "the documented bound: requests_per_s x (1 + STALE_S) + 1 a second"


def test_a_429_drops_the_reserved_slots_and_tells_the_shared_bucket():
    clock = Clock()
    bucket = Bucket(clock)
    limiter = limited(clock, bucket)
    with limiter.request():
        pass

    limiter.throttle(2.0)

    assert bucket.throttles == [2.0]
    assert not limiter.slots and limiter.rate == 10.0
    with limiter.request():
        pass
    assert len(bucket.takes) == 2, "the slots reserved before the 429 are not used"


@pytest.mark.parametrize(
    ("retry_after", "told"),
    [(float("inf"), 300.0), (99_999_999_999.0, 300.0), (float("nan"), 300.0), (-3.0, 0.0), (2.0, 2.0), (None, None)],
    ids=["inf", "absurd", "nan", "negative", "plain", "none"],
)
def test_the_shared_bucket_is_told_a_pause_of_at_most_max_retry_after_s(retry_after, told):
    clock = Clock()
    bucket = Bucket(clock)
    limiter = limited(clock, bucket, max_retry_after_s=300)

    limiter.throttle(retry_after)

    assert bucket.throttles == [told]


def test_a_slot_further_away_than_the_deadline_fails_the_request_instead_of_waiting():
    clock = Clock()
    bucket = Bucket(clock, next=clock() + 3_600)  # the shared row says: no request for an hour
    limiter = limited(clock, bucket, deadline_s=20)

    paused = r"source connection 'src' has no request slot for 3.6e\+03s"
    with pytest.raises(SourcePausedError, match=paused) as err, limiter.request():
        pass

    assert err.value.retriable is True
    assert err.value.retry_after == pytest.approx(3_600), "the caller retries when the slot comes"
    assert clock.slept == [], "nothing slept: the wait would outlive the request's deadline"


def test_a_slot_the_shared_bucket_refused_fails_the_request_and_reserves_nothing():
    clock = Clock()
    bucket = Bucket(clock, next=clock() + 600, count=0)  # PostgreSQL refused: the first slot is beyond the deadline
    limiter = limited(clock, bucket, deadline_s=20)

    with pytest.raises(SourcePausedError, match=r"longer than source.deadline_s \(20s\)") as err, limiter.request():
        pass

    assert err.value.retry_after == pytest.approx(600), "how far the first slot is"

    assert clock.slept == [] and not limiter.slots


def waiting_for_a_permit(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked in a semaphore's ``acquire`` (waiting on its condition)."""
    frame = sys._current_frames().get(thread.ident or -1)
    names = []
    while frame is not None:
        if frame.f_code.co_filename == threading.__file__:
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names[:2] == ["wait", "acquire"]


def test_requests_in_flight_never_exceed_max_in_flight_across_threads():
    limiter = SourceLimiter(SourceConfig(conn_id="src", requests_per_s=None, max_in_flight=3), bucket=None)
    inside: list[int] = []
    release = threading.Event()

    def call(i: int) -> None:
        with limiter.request():
            inside.append(i)
            release.wait(60)

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(12)]
    for thread in threads:
        thread.start()
    try:
        wait_until(
            lambda: len(inside) + sum(map(waiting_for_a_permit, threads)) == 12,
            30,
            "every request in flight or waiting for a permit",
        )
        assert len(inside) == 3, f"{len(inside)} requests in flight at once"
    finally:
        release.set()
    for thread in threads:
        thread.join(30)
    assert sorted(inside) == list(range(12)), "each request had its turn"


@pytest.mark.parametrize(
    ("limits", "postgres", "limited_rate", "bounded"),
    [
        ({}, "crawler_db", True, True),
        ({"requests_per_s": None}, "crawler_db", False, True),
        ({"max_in_flight": None}, "crawler_db", True, False),
        ({"requests_per_s": None, "max_in_flight": None}, "crawler_db", None, None),
        ({}, None, None, None),
    ],
    ids=["defaults", "rate-off", "in-flight-off", "both-off", "no-database"],
)
def test_a_limiter_exists_for_what_is_limited_and_is_shared_in_the_process(limits, postgres, limited_rate, bounded):
    source = SourceConfig(conn_id="src_shared", **limits)

    limiter = limiter_for(source, postgres)

    if limited_rate is None:
        assert limiter is None
        return
    assert limiter is not None
    assert (limiter.bucket is not None, limiter.flight is not None) == (limited_rate, bounded)
    assert limiter.permits is None, "a bounded connection takes its permits from PostgreSQL, not a semaphore"
    assert limiter_for(SourceConfig(conn_id="src_shared", **limits), postgres) is limiter, "one per process"
    ratelimit._limiters.clear()


def test_the_last_hook_done_with_a_limiter_closes_its_connection_and_the_next_one_reopens_it():
    clock = Clock()
    bucket = Bucket(clock)
    limiter = limited(clock, bucket)
    limiter.attach()
    limiter.attach()

    limiter.detach()
    assert bucket.closed == 0, "another hook still uses it"
    limiter.detach()
    assert bucket.closed == 1
    with limiter.request():
        pass
    assert len(bucket.takes) == 1, "a later request takes slots again (the store reconnects)"


@pytest.mark.parametrize(
    ("cut", "retry_after", "level", "said"),
    [
        (True, 2.0, "WARNING", "source src: 429 / Retry-After, shared rate halved to 10 requests/s; no request for 2s"),
        (False, None, "INFO", "source src: 429 / Retry-After, shared rate stays at 10 requests/s"),
    ],
    ids=["halved", "kept"],
)
def test_a_429_says_what_became_of_the_shared_rate(caplog, cut, retry_after, level, said):
    clock = Clock()
    bucket = Bucket(clock)
    bucket.throttle = lambda after: (10.0, cut)  # type: ignore[method-assign]
    caplog.set_level("INFO", logger=ratelimit.__name__)

    limited(clock, bucket).throttle(retry_after)

    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(level, said)]


def test_a_slot_reserved_before_any_of_several_429s_during_the_wait_is_not_used():
    clock = Clock()
    bucket = Bucket(clock)
    limiter = limited(clock, bucket)
    limiter.throttles = 1
    throttled_at: list[float] = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if len(throttled_at) < 1:
            throttled_at.append(clock())
            limiter.throttle(None)  # a second 429 while this request waits for its slot

    limiter.sleep = sleep
    bucket.next = clock() + 0.5
    with limiter.request():
        pass

    assert len(bucket.takes) == 2, "the slot taken before the 429 was dropped and another one reserved"


def test_the_rate_coming_back_to_the_ceiling_is_said_once(caplog):
    clock = Clock()
    bucket = Bucket(clock)
    limiter = limited(clock, bucket)
    caplog.set_level("INFO", logger=ratelimit.__name__)
    assert limiter.rate == 20
    with limiter.request():
        pass
    assert caplog.records == [], "at the ceiling from the start: nothing to say"
    limiter.throttle(None)
    caplog.clear()
    for _ in range(12):
        with limiter.request():
            pass

    assert [r.getMessage() for r in caplog.records] == ["source src: shared rate back at 20 requests/s"]
    assert limiter.rate == 20


def test_a_limiter_without_a_rate_never_asks_a_bucket():
    clock = Clock()
    limiter = limited(clock, Bucket(clock), requests_per_s=None, max_in_flight=2)

    assert limiter.bucket is None
