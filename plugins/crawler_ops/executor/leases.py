"""What one executor worker holds, shared by its two threads; pure bookkeeping, no database.

The runner thread takes claimed rows one at a time, calls the function and reports each outcome. The
coordinator thread claims, records outcomes, renews and gives back, and reads from here what is due:

- a row in progress (or finished, outcome not yet recorded) has its lease renewed once it is ``renew_after``
  old, so a function that outlives ``period`` never loses its row to another worker;
- a claimed row not started within ``hold_limit`` of its claim is never started: it is given back, so rows
  waiting behind a slow call are not locked away from other workers for a whole lease;
- the worker claims ahead only what should start within ``horizon`` at the measured pace of the function.

Times are ``time.monotonic()`` taken before the statement that set the lease in the database, so a lease
is never older there than it is here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from crawler_ops.hooks.store.status_table import ClaimedRow

TIMED_OUT = "timed out after {:g}s"


@dataclass(frozen=True)
class LeaseTimes:
    """How long rows may wait and when leases are renewed, from the lease ``period`` (seconds)."""

    period: float
    tick: float
    renew_after: float
    hold_limit: float
    horizon: float
    flush_after: float

    @classmethod
    def for_period(cls, period: float) -> LeaseTimes:
        # A short horizon keeps few rows waiting in one worker's hands (at the end of a run the others would sit
        # idle next to them), while a claim still feeds enough calls that its round trip stays small beside them.
        return cls(
            period=period,
            tick=min(0.25, period / 6),
            renew_after=period / 3,
            hold_limit=period / 2,
            horizon=min(0.2, period / 4),
            flush_after=min(0.1, period / 6),
        )


@dataclass
class Outcomes:
    """Outcomes waiting to be recorded: rows done, and rows failed with their error, since the first of them."""

    done: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    since: float | None = None

    def __len__(self) -> int:
        return len(self.done) + len(self.failed)

    def add(self, row_id: int, error: str | None, now: float) -> None:
        if error is None:
            self.done.append(row_id)
        else:
            self.failed[row_id] = error
        if self.since is None:
            self.since = now

    def drop(self, row_id: int) -> None:
        """Forget a row's outcome (another worker took the row over)."""
        if self.failed.pop(row_id, None) is None and row_id in self.done:
            self.done.remove(row_id)


@dataclass
class Pace:
    """How many rows a worker claims ahead: what the function gets through within ``horizon`` seconds at its
    measured pace, starting with one row and at most doubling per claim.

    :param claim_batch: most rows claimed ahead.
    :param horizon: seconds within which the rows claimed ahead should start.
    """

    claim_batch: int
    horizon: float
    ramp: int = 1
    seconds: float | None = None  # per call, moving average

    def observe(self, elapsed: float) -> None:
        self.seconds = elapsed if self.seconds is None else 0.8 * self.seconds + 0.2 * elapsed

    def grow(self) -> None:
        self.ramp = min(self.claim_batch, 2 * self.ramp)

    def ahead(self, running_for: float) -> int:
        """A call running longer than the pace says counts as the pace, so nothing is claimed ahead behind a
        call that is taking long."""
        pace = max(self.seconds or 0.0, running_for)
        fits = int(self.horizon / pace) if pace > 0 else self.claim_batch
        return min(self.claim_batch, self.ramp, fits)


class Waiting:
    """Claimed rows not started yet, in claim order, each with when it was claimed.

    :param hold_limit: seconds after its claim a row may still start.
    """

    def __init__(self, hold_limit: float) -> None:
        self.hold_limit = hold_limit
        self.rows: deque[tuple[ClaimedRow, float]] = deque()
        self.skipped: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, rows: list[ClaimedRow], leased: float) -> None:
        self.rows.extend((row, leased) for row in rows)

    def take(self, now: float) -> tuple[ClaimedRow, float] | None:
        """The next row young enough to start, and when it was claimed; older ones are set aside."""
        while self.rows:
            row, leased = self.rows.popleft()
            if now - leased < self.hold_limit:
                return row, leased
            self.skipped.append(row.id)
        return None

    def stale(self, now: float) -> list[int]:
        """Rows set aside, and rows that grew too old to start meanwhile, taken out."""
        stale, self.skipped = self.skipped, []
        while self.rows and now - self.rows[0][1] >= self.hold_limit:
            stale.append(self.rows.popleft()[0].id)
        return stale


class Handoff:
    """How the two threads wake each other: the runner nudges the coordinator (which otherwise wakes once a
    tick), the coordinator notifies the runner of new rows; stopping, and a runner failure, are seen by both.

    :param tick: longest the coordinator sleeps.
    """

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.cond = threading.Condition()
        self.nudged = False
        self.stopping = False
        self.crash: BaseException | None = None

    def wait(self) -> None:
        """Until the runner asks for attention (or one tick); a request made meanwhile is not missed."""
        with self.cond:
            if not self.nudged:
                self.cond.wait(self.tick)
            self.nudged = False

    def nudge(self) -> None:
        """Wake the coordinator (the caller holds ``cond``)."""
        self.nudged = True
        self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def crashed(self, exc: BaseException) -> None:
        """The runner thread failed outside the user function (which it never lets raise)."""
        with self.cond:
            self.crash = exc
            self.nudge()


class LeaseBook:
    """The rows one worker holds: queued (claimed, not started), the one in progress, finished ones.

    :param times: lease timings.
    :param claim_batch: most rows claimed ahead.
    :param clock: monotonic clock (injectable for tests).
    """

    def __init__(self, times: LeaseTimes, claim_batch: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.times = times
        self.claim_batch = claim_batch
        self.clock = clock
        self.handoff = Handoff(times.tick)
        self.cond = self.handoff.cond
        self.queue = Waiting(times.hold_limit)
        self.running: tuple[ClaimedRow, float] | None = None
        self.leases: dict[int, float] = {}  # started rows not yet recorded -> when their lease was last set
        self.outcomes = Outcomes()
        self.generation = 0
        self.waiting = False  # the runner waits for rows
        self.pace = Pace(claim_batch, times.horizon)

    # ----------------------------------------------------------------- runner side

    def next_row(self, generation: int) -> ClaimedRow | None:
        """The next row to call (now in progress), waiting for one; None when the runner should stop.

        A queued row past the hold limit is skipped (the coordinator gives it back), never started.
        """
        with self.cond:
            while generation == self.generation and not self.handoff.stopping:
                now = self.clock()
                taken = self.queue.take(now)
                if taken is not None:
                    row, self.leases[taken[0].id] = taken
                    self.running, self.waiting = (row, now), False
                    return row
                self.waiting = True
                self.handoff.nudge()
                self.cond.wait()
            return None

    def finish(self, generation: int, row: ClaimedRow, error: str | None) -> bool:
        """Report the outcome of the call on ``row``; False when this runner was abandoned meanwhile."""
        with self.cond:
            if generation != self.generation:
                return False
            now = self.clock()
            started = self.running[1] if self.running else now
            self.running = None
            self.outcomes.add(row.id, error, now)
            elapsed = now - started
            self.pace.observe(elapsed)
            if (
                len(self.outcomes) >= self.claim_batch
                or elapsed >= self.times.flush_after
                or 2 * len(self.queue) <= self.ahead()
            ):
                self.handoff.nudge()
            return True

    # ----------------------------------------------------------------- coordinator side

    def add(self, rows: list[ClaimedRow], leased: float) -> None:
        with self.cond:
            self.queue.add(rows, leased)
            if rows:
                self.pace.grow()
            self.cond.notify_all()

    def overdue(self, timeout_s: float) -> ClaimedRow | None:
        """Abandon the call in progress when it outlived ``timeout_s``: its row fails as timed out."""
        with self.cond:
            if self.running is None or self.clock() - self.running[1] < timeout_s:
                return None
            row = self.running[0]
            self.abandon()
            self.pace.observe(timeout_s)
            self.outcomes.add(row.id, TIMED_OUT.format(timeout_s), self.clock())
            return row

    def abandon(self) -> None:
        """The runner in progress is let go: whatever its call does later is not recorded."""
        self.generation += 1
        self.running = None
        self.waiting = False
        self.cond.notify_all()

    def stale(self) -> list[int]:
        """Queued rows too old to start, taken out of the queue (to be given back)."""
        with self.cond:
            return self.queue.stale(self.clock())

    def due(self) -> list[int]:
        """Started rows not yet recorded whose lease is due for renewal."""
        with self.cond:
            now = self.clock()
            return [i for i, leased in self.leases.items() if now - leased >= self.times.renew_after]

    def renewed(self, asked: list[int], kept: list[int], leased: float) -> list[int]:
        """Record a renewal; returns the rows whose lease was lost (taken over), dropping their outcome."""
        with self.cond:
            lost = sorted(set(asked) - set(kept))
            for row_id in kept:
                if row_id in self.leases:
                    self.leases[row_id] = leased
            for row_id in lost:
                self.leases.pop(row_id, None)
                if self.running is not None and self.running[0].id == row_id:
                    self.abandon()
                self.outcomes.drop(row_id)
            return lost

    def take_outcomes(self, force: bool = False) -> Outcomes:
        """The outcomes to record now (all of them), or none when it can wait for more."""
        with self.cond:
            outcomes = self.outcomes
            if not outcomes or not (
                force
                or self.idle()
                or len(outcomes) >= self.claim_batch
                or self.clock() - (outcomes.since or 0) >= self.times.flush_after
            ):
                return Outcomes()
            for row_id in (*outcomes.done, *outcomes.failed):
                self.leases.pop(row_id, None)
            self.outcomes = Outcomes()
            return outcomes

    def claim_size(self) -> int:
        """How many rows to claim now: enough to start soon, none while plenty are queued."""
        with self.cond:
            ahead = self.ahead()
            if self.idle():
                return max(1, ahead)
            return ahead - len(self.queue) if 2 * len(self.queue) < ahead else 0

    def ahead(self) -> int:
        """Rows that may wait unstarted now (see :class:`Pace`)."""
        return self.pace.ahead(self.clock() - self.running[1] if self.running else 0.0)

    def idle(self) -> bool:
        return self.waiting and not self.queue and self.running is None
