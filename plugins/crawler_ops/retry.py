"""The one retry policy of every HTTP call the package makes (source pages and counts, token requests, schema
registry calls, webhook deliveries), and the Airflow-level retries of a step beside it (pure: no I/O).

A call that fails retriably (a timeout, a 408 / 425 / 429 / 5xx, a truncated body) is tried again up to
``retries`` more times. Before retry ``n`` (0-based) it waits what the other side asked in its ``Retry-After``
(capped at ``max_retry_after_s``), else a *full jitter* backoff: a uniform draw from ``[0, min(backoff_s * 2**n,
max_backoff_s)]``, so workers that failed together do not come back together. A call may also carry a budget of
waiting (``max_wait_s``) and a deadline (``until``): a wait that would pass either ends the retries at once.

When a call's retries are spent, the step fails and Airflow's own retries take over, minutes later
(:data:`TASK_RETRY_BACKOFF`, :data:`TASK_MAX_RETRY_DELAY_S`, the config's ``retries`` and ``retry_delay_s``).
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Protocol, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=Exception)

#: Answers that may succeed when asked again: timeouts, too early, too many requests, server errors.
RETRIABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
#: A ``Retry-After`` longer than this is no valid value (an HTTP date is 29 characters): it is not read.
RETRY_AFTER_CHARS = 64
#: Airflow's retries of a failed step: each delay doubles from the task's ``retry_delay_s``, up to 30 minutes.
TASK_RETRY_BACKOFF = 2.0
TASK_MAX_RETRY_DELAY_S = 30 * 60


class Retriable(Protocol):
    """What the loop reads of a failure: whether asking again may pass, and the wait the other side asked for."""

    retriable: bool
    retry_after: float | None


def full_jitter(ceiling: float) -> float:
    """A wait drawn uniformly from ``[0, ceiling]``."""
    return random.uniform(0.0, ceiling)


def retry_after_seconds(value: str | None, cap: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), within ``[0, cap]``: a longer wait,
    ``inf`` or a far date is ``cap``, a negative one or a past date 0; None for no header, NaN, an unreadable value
    or one longer than any valid value (the caller's own backoff applies)."""
    if not value or len(value) > RETRY_AFTER_CHARS:
        return None
    seconds: float | None
    try:
        seconds = float(value)
    except ValueError:
        seconds = http_date_seconds(value)
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(0.0, seconds), cap)


def http_date_seconds(value: str) -> float | None:
    """Seconds from now to an HTTP date (a date without a zone read as UTC); None when it is no date."""
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - time.time()


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a failed call is tried again.

    :param retries: tries after the first one.
    :param backoff_s: the ceiling of the first retry's wait, doubled at each further one ...
    :param max_backoff_s: ... up to this.
    :param max_retry_after_s: the longest ``Retry-After`` honoured; a longer one counts as this.
    :param max_wait_s: all the waits of one call together at most this (None: no budget).
    """

    retries: int
    backoff_s: float
    max_backoff_s: float
    max_retry_after_s: float
    max_wait_s: float | None = None

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before retry ``attempt`` (0 for the first): the other side's Retry-After, else full jitter."""
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_retry_after_s)
        return full_jitter(min(self.backoff_s * 2.0**attempt, self.max_backoff_s))

    def run(
        self,
        call: Callable[[], T],
        errors: type[E] | tuple[type[E], ...],
        *,
        retry_on: Callable[[E], bool] = lambda exc: bool(getattr(exc, "retriable", False)),
        give_up: Callable[[E, int, str | None], Exception] | None = None,
        on_retry: Callable[[E, int, float], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        until: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> T:
        """``call()``'s result, trying again after each failure of ``errors`` that ``retry_on`` accepts.

        A failure ``retry_on`` refuses is raised as it is. When the retries are spent, or the next wait would pass
        ``max_wait_s`` or ``until`` (a :func:`time.monotonic` time), ``give_up(failure, tries, why)`` makes the
        exception raised (default: the failure itself). ``on_retry(failure, retry, delay)`` is told before each
        wait; ``sleep`` waits."""
        attempt, waited = 0, 0.0
        while True:
            try:
                return call()
            except errors as exc:
                if not retry_on(exc):
                    raise
                why = None
                if attempt < self.retries:
                    pause = self.delay(attempt, getattr(exc, "retry_after", None))
                    why = self.too_long(pause, waited, until, clock)
                    if why is None:
                        if on_retry is not None:
                            on_retry(exc, attempt + 1, pause)
                        sleep(pause)
                        attempt, waited = attempt + 1, waited + pause
                        continue
                if give_up is None:
                    raise
                raise give_up(exc, attempt + 1, why) from exc

    def too_long(self, pause: float, waited: float, until: float | None, clock: Callable[[], float]) -> str | None:
        """Why waiting ``pause`` more is not allowed (past ``max_wait_s``, or at or past ``until``), if it is not."""
        budget = math.inf if self.max_wait_s is None else self.max_wait_s - waited
        left = math.inf if until is None else until - clock()
        if pause > budget or pause >= left:
            allowed = max(0.0, min(budget, left))
            return f"it asked to wait {pause:.0f}s, more than the {allowed:.0f}s left of max_wait_s"
        return None
