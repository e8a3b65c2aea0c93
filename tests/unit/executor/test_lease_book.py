"""The executor worker's lease bookkeeping (crawler_ops.executor.leases) at its boundaries: when the runner nudges
the coordinator, when outcomes are recorded, how much is claimed, when a lease is due or a call overdue, and what
abandoning a runner resets. A hand-moved clock; one runner thread where the runner must wait."""

from __future__ import annotations

import threading
import time
from dataclasses import astuple

import pytest

from crawler_ops.executor.leases import Handoff, LeaseBook, LeaseTimes, Outcomes, Pace, Waiting
from tests.unit.executor.test_executor_units import book, rows


def test_lease_times_follow_the_period_with_caps_for_long_periods():
    assert LeaseTimes.for_period(60) == LeaseTimes(60, 0.25, 20, 30, 0.2, 0.1)
    assert astuple(LeaseTimes.for_period(0.3)) == pytest.approx((0.3, 0.05, 0.1, 0.15, 0.075, 0.05))


def test_a_new_handoff_and_book_wait_for_nothing_and_hold_nothing():
    handoff = Handoff(0.5)
    assert (handoff.tick, handoff.nudged, handoff.stopping, handoff.crash) == (0.5, False, False, None)
    with handoff.cond:
        handoff.nudge()
    assert handoff.nudged
    handoff.wait()
    assert not handoff.nudged, "a nudge is consumed by the wait it ends"
    lease, _ = book(period=60)
    assert lease.handoff.tick == 0.25 and lease.waiting is False and not lease.idle()


class RecordingCondition:
    """Stands in for the handoff's condition: records each wait's timeout instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    def __enter__(self) -> RecordingCondition:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return False

    def notify_all(self) -> None:
        return None


def test_the_coordinator_sleeps_a_tick_unless_nudged_and_a_runner_crash_wakes_it():
    handoff = Handoff(30.0)
    handoff.cond = RecordingCondition()  # type: ignore[assignment]
    handoff.wait()
    assert handoff.cond.waits == [30.0], "not nudged: one tick"
    handoff.nudge()
    handoff.wait()
    assert handoff.cond.waits == [30.0] and not handoff.nudged, "nudged before: no sleep, the nudge consumed"
    crash = RuntimeError("runner")
    handoff.crashed(crash)
    assert handoff.crash is crash and handoff.nudged


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"not within 10 s: {what}"
        time.sleep(0.001)


def test_a_runner_with_nothing_queued_waits_and_asks_for_rows():
    lease, clock = book(period=60)
    got = []
    runner = threading.Thread(target=lambda: got.append(lease.next_row(0)))
    runner.start()
    wait_until(lambda: lease.waiting, "the runner waits")
    assert lease.handoff.nudged and lease.idle()
    lease.add(rows(7), clock.now)
    runner.join(10)
    assert got == rows(7) and lease.waiting is False and lease.running == (rows(7)[0], clock.now)
    assert not lease.idle()


def test_a_stopped_or_abandoned_runner_gets_no_row():
    lease, clock = book(period=60)
    lease.add(rows(1), clock.now)
    lease.generation = 5
    assert lease.next_row(4) is None, "an abandoned runner"
    lease.handoff.stop()
    assert lease.next_row(5) is None
    assert len(lease.queue) == 1


def test_abandoning_lets_the_runner_go_and_resets_what_it_held():
    lease, clock = book(period=60)
    lease.generation = 5
    lease.add(rows(1), clock.now)
    lease.next_row(5)
    lease.waiting = True
    with lease.cond:
        lease.abandon()
    assert (lease.generation, lease.running, lease.waiting) == (6, None, False)


def finished(lease: LeaseBook, elapsed: float, queued: int) -> bool:
    """Whether finishing a call that took ``elapsed`` seconds with ``queued`` rows waiting nudges the coordinator."""
    lease.add(rows(*range(100, 100 + queued + 1)), lease.clock())
    row = lease.next_row(lease.generation)
    assert row is not None
    lease.clock.now += elapsed  # type: ignore[attr-defined]
    lease.handoff.nudged = False
    assert lease.finish(lease.generation, row, None)
    return lease.handoff.nudged


def test_finishing_a_call_nudges_the_coordinator_at_a_batch_of_outcomes_a_slow_call_or_a_short_queue():
    def fresh(claim_batch: int = 100) -> LeaseBook:
        lease, _ = book(period=600, claim_batch=claim_batch)
        lease.pace.ramp = 4
        return lease

    assert not finished(fresh(), 0.05, queued=3), "fast, few outcomes, 3 queued of 4 ahead"
    short, _ = book(period=0.375)  # flush_after 0.0625 s, exact in binary
    assert finished(short, 0.0625, queued=3), "a call of flush_after"
    short, _ = book(period=0.375)
    assert not finished(short, 0.05, queued=3)
    assert finished(fresh(claim_batch=1), 0.0, queued=3), "a batch of outcomes (claim_batch 1)"
    lease = fresh()
    lease.pace.ramp = 3  # doubled to 6 by the rows added
    assert finished(lease, 0.0, queued=3), "3 queued is half of the 6 ahead"
    assert lease.running is None
    assert lease.pace.seconds == 0.0
    lease = fresh()
    assert not finished(lease, 0.05, queued=3)
    assert lease.pace.seconds == pytest.approx(0.05), "the call's own time, from its start"


def test_outcomes_are_taken_when_forced_idle_a_batch_or_old_enough():
    lease, clock = book(period=0.375, claim_batch=2)  # flush_after 0.0625 s
    assert len(lease.take_outcomes(force=True)) == 0
    lease.outcomes.add(1, None, clock.now)
    lease.leases[1] = clock.now
    clock.now += 0.03125
    assert len(lease.take_outcomes()) == 0
    clock.now += 0.03125
    taken = lease.take_outcomes()
    assert taken.done == [1] and lease.leases == {} and len(lease.outcomes) == 0
    lease.outcomes.add(2, None, clock.now)
    lease.outcomes.add(3, "e", clock.now)
    lease.leases.update({2: clock.now, 3: clock.now, 4: clock.now})
    taken = lease.take_outcomes()
    assert (taken.done, taken.failed, lease.leases) == ([2], {3: "e"}, {4: clock.now}), "a batch of claim_batch"
    lease.outcomes.add(5, None, clock.now)
    lease.waiting = True
    assert lease.take_outcomes().done == [5], "the runner is idle"
    lease.waiting = False
    lease.outcomes.add(6, None, clock.now)
    assert len(lease.take_outcomes(force=True)) == 1
    lease.outcomes.add(7, None, clock.now)
    lease.take_outcomes(force=True)
    lease.outcomes.add(8, None, clock.now)
    assert lease.outcomes.done == [8]


def test_claims_fill_the_queue_up_to_what_starts_soon():
    lease, clock = book(period=600, claim_batch=100)
    lease.add(rows(1, 2), clock.now)
    lease.pace.ramp = 6
    assert lease.claim_size() == 4, "6 ahead, 2 queued"
    lease.add(rows(3), clock.now)
    lease.pace.ramp = 6
    assert lease.claim_size() == 0, "3 queued is half of 6: plenty"
    lease.pace.ramp = 7
    assert lease.claim_size() == 4


def test_a_lease_is_due_exactly_a_third_of_the_period_after_it_was_set():
    lease, clock = book(period=60)
    lease.leases = {1: clock.now - 20, 2: clock.now - 19.9}
    assert lease.due() == [1]


def test_a_call_is_overdue_exactly_at_its_timeout():
    lease, clock = book(period=600)
    lease.add(rows(5), clock.now)
    row = lease.next_row(0)
    clock.now += 10
    assert lease.overdue(10) == row
    outcomes = lease.take_outcomes(force=True)
    assert outcomes.since == clock.now and lease.pace.seconds == 10


def test_a_lost_lease_abandons_only_the_call_on_that_row():
    lease, clock = book(period=600)
    lease.add(rows(1, 2), clock.now)
    lease.next_row(0)
    lease.leases[2] = clock.now
    lease.outcomes.add(2, None, clock.now)
    assert lease.renewed([1, 2], [1], clock.now + 5) == [2]
    assert lease.generation == 0 and lease.running is not None, "row 1's call goes on"
    assert lease.leases == {1: clock.now + 5} and lease.outcomes.done == []
    assert lease.renewed([3], [], clock.now + 6) == [3], "a row lost that this book no longer holds: no error"


def test_the_parts_on_their_own():
    outcomes = Outcomes()
    outcomes.add(1, None, 5.0)
    outcomes.add(2, "e", 6.0)
    outcomes.drop(3)
    outcomes.drop(2)
    outcomes.drop(1)
    assert (outcomes.done, outcomes.failed, outcomes.since) == ([], {}, 5.0)
    pace = Pace(claim_batch=10, horizon=1.0)
    pace.observe(1.0)
    pace.observe(0.5)
    assert pace.seconds == pytest.approx(0.9)
    assert pace.ahead(0.0) == 1 and pace.ahead(2.0) == 0
    pace.ramp, pace.seconds = 10, 0.0
    assert pace.ahead(0.0) == 10
    waiting = Waiting(hold_limit=10)
    waiting.add(rows(1, 2), 0.0)
    assert waiting.take(10.0) is None and waiting.skipped == [1, 2]
    waiting.add(rows(3), 0.0)
    assert waiting.take(9.999) == (rows(3)[0], 0.0)
    waiting.add(rows(4), 0.0)
    assert waiting.stale(10.0) == [1, 2, 4] and waiting.skipped == []
