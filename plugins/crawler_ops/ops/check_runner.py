"""The status view's source checks, run off the api-server's threads.

A check asks a source (seconds, within its deadline); the api-server's thread pool serves Airflow's own sync routes
too, so no request may hold one of its threads while a check runs. The routes are async and await a check running in
a pool of its own:

- at most ``most`` checks run at once; a check asked beyond that, with no answer to give, is :class:`BusyError` at
  once (the route answers 503), never a wait;
- one user starts one check at a time; a second one while the first runs is :class:`UserBusyError` (429);
- a task's check runs once at a time: whoever asks meanwhile awaits the same answer (no check, no thread taken);
- an answer is given again for ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from crawler_ops.ops.report_cache import BusyError

Report = dict[str, Any]


class UserBusyError(BusyError):
    """The user has a check running already."""


class CheckRunner:
    """Source checks by task, at most ``most`` at once and one per user, answers kept for ``ttl_s``.

    :param clock: the monotonic clock answers are aged by.
    """

    def __init__(self, ttl_s: float, most: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.most, self.clock = ttl_s, most, clock
        self.pool = ThreadPoolExecutor(most, thread_name_prefix="crawler-ops-check")
        self.lock = threading.Lock()
        self.answers: dict[Hashable, tuple[float, Report]] = {}
        self.flights: dict[Hashable, Future[Report]] = {}
        self.users: set[Hashable] = set()

    async def report(self, task: Hashable, user: Hashable, check: Callable[[], Report]) -> Report:
        """The check of ``task``: a fresh answer, the one under way, or ``check()`` started for ``user``.

        :raises UserBusyError: ``user`` has a check of another task running.
        :raises BusyError: ``most`` checks are running.
        """
        started = False
        with self.lock:
            known = self.answers.get(task)
            if known is not None and self.clock() - known[0] < self.ttl_s:
                return known[1]
            flight = self.flights.get(task)
            if flight is None:
                if user in self.users:
                    raise UserBusyError("a check you started is still running")
                if len(self.flights) >= self.most:
                    raise BusyError(f"{self.most} source checks are running")
                flight = self.flights[task] = self.pool.submit(check)
                self.users.add(user)
                started = True
        if started:  # outside the lock: a check already done runs its callback here, at once
            flight.add_done_callback(lambda done: self.landed(task, user, done))
        return await asyncio.wrap_future(flight)

    def landed(self, task: Hashable, user: Hashable, done: Future[Report]) -> None:
        with self.lock:
            self.flights.pop(task, None)
            self.users.discard(user)
            if not done.cancelled() and done.exception() is None:
                now = self.clock()
                self.answers = {k: v for k, v in self.answers.items() if now - v[0] < self.ttl_s}
                self.answers[task] = (now, done.result())
