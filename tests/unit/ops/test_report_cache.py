"""The status view's report cache: how long an answer is given again, what a request gets when every slot is taken,
and that one build answers every request asking the same question meanwhile. Time is a fake clock; threads wait on
events, never on sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from crawler_ops.ops import report_cache

WAIT_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Builds:
    """Report builders that count their calls; ``blocked()`` is one that waits for :meth:`release`."""

    def __init__(self) -> None:
        self.count = 0
        self.started = threading.Event()
        self.go = threading.Event()

    def answer(self, value: str) -> Callable[[], dict[str, Any]]:
        def build() -> dict[str, Any]:
            self.count += 1
            return {"answer": value}

        return build

    def blocked(self, value: str) -> Callable[[], dict[str, Any]]:
        def build() -> dict[str, Any]:
            self.count += 1
            self.started.set()
            assert self.go.wait(WAIT_S), "the test never released the build"
            return {"answer": value}

        return build

    def failing(self) -> Callable[[], dict[str, Any]]:
        def build() -> dict[str, Any]:
            self.count += 1
            raise RuntimeError("PostgreSQL is down")

        return build


def deadline() -> float:
    return time.monotonic() + WAIT_S


@pytest.mark.parametrize("live", [True, False], ids=["live", "stored"])
def test_an_answer_is_given_again_until_it_is_ttl_old_then_built_anew(live):
    clock, builds = Clock(), Builds()
    cache = report_cache.ReportCache(ttl_s=20.0, clock=clock)

    assert cache.report("q", live, builds.answer("first"), deadline()) == {"answer": "first"}
    clock.now += 19.999
    assert cache.report("q", live, builds.answer("second"), deadline()) == {"answer": "first"}
    assert builds.count == 1
    clock.now += 0.001
    assert cache.report("q", live, builds.answer("second"), deadline()) == {"answer": "second"}
    assert builds.count == 2


def test_each_question_has_its_own_answer():
    cache, builds = report_cache.ReportCache(clock=Clock()), Builds()
    cache.report(("a", None, True, False), True, builds.answer("a"))
    cache.report(("b", None, True, False), True, builds.answer("b"))
    assert cache.report(("a", None, True, False), True, builds.answer("x")) == {"answer": "a"}
    assert cache.report(("b", None, True, False), True, builds.answer("x")) == {"answer": "b"}


def test_keeping_an_answer_drops_those_older_than_stale_after():
    clock, builds = Clock(), Builds()
    cache = report_cache.ReportCache(clock=clock)
    cache.report("old", True, builds.answer("old"))
    clock.now += 1.0
    cache.report("younger", True, builds.answer("younger"))
    clock.now += report_cache.STALE_AFTER_S - 1.0
    cache.report("new", True, builds.answer("new"))
    assert set(cache.answers) == {"younger", "new"}, "an answer exactly STALE_AFTER_S old is dropped, a younger one not"
    assert cache.answers["new"] == (clock.now, {"answer": "new"})


def test_a_live_request_finding_every_slot_taken_gets_the_last_answer_however_old_or_is_busy():
    clock, builds = Clock(), Builds()
    cache = report_cache.ReportCache(ttl_s=1.0, max_live=1, clock=clock)
    cache.report("known", True, builds.answer("old"))
    clock.now += 500.0
    with ThreadPoolExecutor(1) as pool:
        holding = pool.submit(cache.report, "slow", True, builds.blocked("slow"))
        assert builds.started.wait(WAIT_S)
        assert cache.report("known", True, builds.answer("never built")) == {"answer": "old"}
        with pytest.raises(report_cache.BusyError, match=r"^1 live status reports are being gathered$"):
            cache.report("unknown", True, builds.answer("never built"))
        builds.go.set()
        assert holding.result(WAIT_S) == {"answer": "slow"}
    assert builds.count == 2
    # The slot was given back: the next live question is built.
    assert cache.report("unknown", True, builds.answer("now")) == {"answer": "now"}


def test_a_live_build_that_fails_gives_its_slot_back():
    cache, builds = report_cache.ReportCache(max_live=1, clock=Clock()), Builds()
    with pytest.raises(RuntimeError, match="PostgreSQL is down"):
        cache.report("q", True, builds.failing())
    assert cache.report("q", True, builds.answer("after")) == {"answer": "after"}
    assert "q" in cache.answers


def test_requests_asking_a_stored_question_meanwhile_share_one_build():
    # No answer is given again (ttl 0): a request that did not wait for the build under way would build its own.
    cache, builds = report_cache.ReportCache(ttl_s=0.0, clock=Clock()), Builds()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(cache.report, "q", False, builds.blocked("shared"), deadline())
        assert builds.started.wait(WAIT_S)
        flight = cache.flights["q"]
        # Two ask with a deadline, one without.
        ends = [deadline(), deadline(), None]
        others = [pool.submit(cache.report, "q", False, builds.answer("own"), end) for end in ends]
        # Each waits on the flight's condition (CPython's Future keeps its waiting threads there).
        wait_until(lambda: len(flight._condition._waiters) == 3, "the other requests to wait for the build")  # type: ignore[attr-defined]
        builds.go.set()
        answers = [first.result(WAIT_S), *(o.result(WAIT_S) for o in others)]
    assert builds.count == 1 and all(a is answers[0] for a in answers) and answers[0] == {"answer": "shared"}
    assert cache.flights == {}, "the flight ends with its build"


def wait_until(condition: Callable[[], Any], what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_stored_build_that_fails_fails_its_request_and_the_next_request_builds_again():
    cache, builds = report_cache.ReportCache(clock=Clock()), Builds()
    with pytest.raises(RuntimeError, match="PostgreSQL is down"):
        cache.report("q", False, builds.failing(), deadline())
    assert cache.flights == {}
    assert cache.report("q", False, builds.answer("after"), deadline()) == {"answer": "after"}
    assert builds.count == 2


def with_an_old_answer(**limits: int) -> tuple[report_cache.ReportCache, Builds]:
    """A cache whose answer to "known" is {"answer": "old"}, long past its time to live."""
    clock, builds = Clock(), Builds()
    cache = report_cache.ReportCache(ttl_s=1.0, clock=clock, **limits)
    cache.report("known", False, builds.answer("old"), deadline())
    clock.now += 500.0
    return cache, builds


def test_a_stored_request_waiting_past_its_deadline_gets_the_last_answer_or_is_busy():
    cache, builds = with_an_old_answer()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(cache.report, "known", False, builds.blocked("new"), deadline())
        assert builds.started.wait(WAIT_S)
        # The deadline is over already: a request that finds the build under way waits only the grace period.
        assert cache.report("known", False, builds.answer("never built"), time.monotonic()) == {"answer": "old"}
        builds.go.set()
        assert first.result(WAIT_S) == {"answer": "new"}
    builds.started.clear()
    builds.go.clear()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(cache.report, "unknown", False, builds.blocked("new"), deadline())
        assert builds.started.wait(WAIT_S)
        with pytest.raises(report_cache.BusyError, match=r"^the status report is being gathered$"):
            cache.report("unknown", False, builds.answer("never built"), time.monotonic())
        builds.go.set()
        assert first.result(WAIT_S) == {"answer": "new"}


def test_a_stored_request_finding_every_build_slot_taken_until_its_deadline_gets_the_last_answer_or_is_busy():
    cache, builds = with_an_old_answer(max_builds=1)
    with ThreadPoolExecutor(1) as pool:
        holding = pool.submit(cache.report, "slow", False, builds.blocked("slow"), deadline())
        assert builds.started.wait(WAIT_S)
        assert cache.report("known", False, builds.answer("never built"), time.monotonic()) == {"answer": "old"}
        with pytest.raises(report_cache.BusyError, match=r"^1 status reports are being gathered$"):
            cache.report("unknown", False, builds.answer("never built"), time.monotonic())
        assert cache.flights.keys() == {"slow"}, "a request that got no slot leaves no flight behind"
        builds.go.set()
        assert holding.result(WAIT_S) == {"answer": "slow"}
    assert builds.count == 2


def test_a_stored_question_without_a_deadline_is_built_and_kept():
    cache, builds = report_cache.ReportCache(clock=Clock()), Builds()
    assert cache.report("q", False, builds.answer("built")) == {"answer": "built"}
    assert cache.report("q", False, builds.answer("again")) == {"answer": "built"} and builds.count == 1


def test_a_request_waiting_for_a_build_gets_its_answer_within_a_grace_period_past_its_deadline():
    cache, builds = with_an_old_answer()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.report, "known", False, builds.blocked("new"), deadline())
        assert builds.started.wait(WAIT_S)
        flight = cache.flights["known"]
        # Less than the grace period (half a second) is left of this request's deadline: it still waits that long.
        waiter = pool.submit(cache.report, "known", False, builds.answer("never built"), time.monotonic() + 0.3)
        wait_until(lambda: len(flight._condition._waiters) == 1, "the request to wait for the build")  # type: ignore[attr-defined]
        builds.go.set()
        assert waiter.result(WAIT_S) == {"answer": "new"} and first.result(WAIT_S) == {"answer": "new"}
