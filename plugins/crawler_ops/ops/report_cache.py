"""The status view's report cache: recent answers by question, and caps on the reports gathered at once.

The status view's routes are sync, so each request holds a thread of the api-server's pool, which Airflow's own API
shares: a question is answered from the cache for ``REPORT_TTL_S`` (one report for every user, filtered per user
when served), and at most ``MAX_LIVE_REPORTS`` live reports are gathered at once; a request beyond that gets the last
answer to its question, however old, or :class:`BusyError` at once, instead of a thread waiting for its turn. A
question without live calls is gathered once at a time (who asks meanwhile waits for that answer, within the
deadline), at most ``MAX_REPORTS`` such reports at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

REPORT_TTL_S = 20.0
MAX_LIVE_REPORTS = 2
# Reports without live calls (PostgreSQL and Airflow only) built at once, each question built once at a time.
MAX_REPORTS = 4
# Answers kept for requests that find every live slot taken; older ones are dropped.
STALE_AFTER_S = 600.0


class BusyError(Exception):
    """Every live slot is taken and the question was never answered before."""


class ReportCache:
    """Recent status reports by question, and caps on the reports gathered at once. A report answers a question for
    every entry of the config; each request filters it for its user (:func:`crawler_ops.ops.web.restrict`), so one
    answer serves all.

    :param ttl_s: an answer younger than this is given again without asking anyone.
    :param max_live: live reports gathered at once; a request beyond it never waits.
    :param max_builds: reports without live calls gathered at once; one such question is gathered once at a time,
        whoever asks it meanwhile waits for that answer.
    :param clock: the monotonic clock answers are aged by.
    """

    def __init__(
        self,
        ttl_s: float = REPORT_TTL_S,
        max_live: int = MAX_LIVE_REPORTS,
        max_builds: int = MAX_REPORTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.slots = threading.BoundedSemaphore(max_live)
        self.max_live = max_live
        self.builds = threading.BoundedSemaphore(max_builds)
        self.max_builds = max_builds
        self.lock = threading.Lock()
        self.answers: dict[Hashable, tuple[float, dict[str, Any]]] = {}
        self.flights: dict[Hashable, Future[dict[str, Any]]] = {}

    def report(
        self, key: Hashable, live: bool, build: Callable[[], dict[str, Any]], end: float | None = None
    ) -> dict[str, Any]:
        """The answer to ``key``: a fresh one from the cache, else ``build()`` (for a live report only while a slot
        is free, else the last answer, however old; else :meth:`shared`, waiting until ``end`` at most).

        :raises BusyError: every slot is taken and ``key`` was never answered.
        """
        with self.lock:
            known = self.answers.get(key)
        if known is not None and self.clock() - known[0] < self.ttl_s:
            return known[1]
        if not live:
            return self.shared(key, known, build, end)
        if not self.slots.acquire(blocking=False):
            if known is not None:
                return known[1]
            raise BusyError(f"{self.max_live} live status reports are being gathered")
        try:
            return self.keep(key, build())
        finally:
            self.slots.release()

    def shared(
        self,
        key: Hashable,
        known: tuple[float, dict[str, Any]] | None,
        build: Callable[[], dict[str, Any]],
        end: float | None,
    ) -> dict[str, Any]:
        """``build()`` once for every request asking ``key`` meanwhile (single flight), while one of the build
        slots is free by ``end``; a request that gets no answer by then gets the last one, however old."""
        with self.lock:
            flight = self.flights.get(key)
            first = flight is None
            if flight is None:
                flight = self.flights[key] = Future()
        left = None if end is None else max(0.0, end - time.monotonic())
        if not first:
            try:
                return flight.result(timeout=None if left is None else left + 0.5)
            except (FutureTimeout, BusyError):
                return self.stale(known)
        try:
            if not self.builds.acquire(timeout=left):
                raise BusyError(f"{self.max_builds} status reports are being gathered")
            try:
                flight.set_result(self.keep(key, build()))
            finally:
                self.builds.release()
        except BaseException as exc:  # noqa: BLE001 - handed to every request waiting for this answer, raised below
            flight.set_exception(exc)
        finally:
            with self.lock:
                self.flights.pop(key, None)
        try:
            return flight.result()
        except BusyError:
            if known is None:
                raise
            return known[1]

    def stale(self, known: tuple[float, dict[str, Any]] | None) -> dict[str, Any]:
        if known is None:
            raise BusyError("the status report is being gathered")
        return known[1]

    def keep(self, key: Hashable, answer: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        with self.lock:
            self.answers = {k: v for k, v in self.answers.items() if now - v[0] < STALE_AFTER_S}
            self.answers[key] = (now, answer)
        return answer
