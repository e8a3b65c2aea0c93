"""The one retry policy: full jitter below a capped exponential ceiling, the other side's Retry-After instead, one loop
that stops on a refused failure, on spent retries, on a spent waiting budget and before a deadline."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops import retry
from crawler_ops.retry import RetryPolicy


class Failed(Exception):
    def __init__(self, retriable: bool = True, retry_after: float | None = None) -> None:
        super().__init__(f"failed (retriable={retriable})")
        self.retriable, self.retry_after = retriable, retry_after


def failing(*outcomes: object) -> tuple[list[int], object]:
    """A call that raises or returns each of ``outcomes`` in turn; the list counts its calls."""
    calls: list[int] = []

    def call() -> object:
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return calls, call


@given(
    attempt=st.integers(0, 40),
    backoff=st.floats(0, 10),
    cap=st.floats(0, 100),
)
@settings(max_examples=300, deadline=None)
def test_a_backoff_wait_lies_between_zero_and_its_capped_exponential_ceiling(attempt, backoff, cap):
    policy = RetryPolicy(retries=50, backoff_s=backoff, max_backoff_s=cap, max_retry_after_s=600)
    assert 0.0 <= policy.delay(attempt) <= min(backoff * 2.0**attempt, cap)


def test_backoff_waits_are_jittered_so_workers_that_failed_together_spread_out():
    policy = RetryPolicy(retries=5, backoff_s=1.0, max_backoff_s=8.0, max_retry_after_s=600)
    waits = [policy.delay(3) for _ in range(200)]
    assert len(set(waits)) > 150, "full jitter draws a different wait each time"
    assert min(waits) < 2.0 and max(waits) > 6.0, "the draws cover [0, 8]"


@pytest.mark.parametrize(
    ("asked", "expected"), [(7.0, 7.0), (900.0, 600.0), (0.0, 0.0)], ids=["honoured", "capped", "at-once"]
)
def test_the_other_sides_retry_after_replaces_the_backoff_within_its_cap(asked, expected):
    policy = RetryPolicy(retries=3, backoff_s=0.5, max_backoff_s=2.0, max_retry_after_s=600)
    assert policy.delay(0, asked) == expected


def test_retriable_failures_are_retried_until_the_call_passes(monkeypatch):
    monkeypatch.setattr(retry, "full_jitter", lambda ceiling: ceiling)
    slept: list[float] = []
    calls, call = failing(Failed(), Failed(retry_after=3.0), "ok")
    policy = RetryPolicy(retries=4, backoff_s=0.5, max_backoff_s=2.0, max_retry_after_s=600)

    assert policy.run(call, Failed, sleep=slept.append) == "ok"
    assert len(calls) == 3 and slept == [0.5, 3.0]


def test_a_refused_failure_is_raised_at_once_without_waiting():
    slept: list[float] = []
    calls, call = failing(Failed(retriable=False), "ok")
    policy = RetryPolicy(retries=4, backoff_s=0.5, max_backoff_s=2.0, max_retry_after_s=600)

    with pytest.raises(Failed, match="retriable=False"):
        policy.run(call, Failed, sleep=slept.append)
    assert len(calls) == 1 and slept == []


def test_spent_retries_end_in_the_callers_give_up_with_the_number_of_tries():
    slept: list[float] = []
    calls, call = failing(*[Failed()] * 4)
    policy = RetryPolicy(retries=2, backoff_s=0.0, max_backoff_s=0.0, max_retry_after_s=600)

    def give_up(failure: Failed, tries: int, why: str | None) -> Exception:
        return RuntimeError(f"gave up after {tries} tries ({why})")

    with pytest.raises(RuntimeError, match=r"gave up after 3 tries \(None\)"):
        policy.run(call, Failed, give_up=give_up, sleep=slept.append)
    assert len(calls) == 3 and len(slept) == 2


@pytest.mark.parametrize(
    ("max_wait_s", "asked", "tries", "slept"),
    [(10.0, [4.0, 4.0, 4.0], 3, [4.0, 4.0]), (10.0, [20.0], 1, []), (None, [4.0, 4.0, 4.0], 4, [4.0] * 3)],
    ids=["budget-spent-on-the-third-wait", "one-ask-over-the-budget", "no-budget"],
)
def test_the_waits_of_one_call_stay_within_its_budget(max_wait_s, asked, tries, slept):
    waited: list[float] = []
    calls, call = failing(*[Failed(retry_after=a) for a in asked], *[Failed()] * 4)
    policy = RetryPolicy(retries=3, backoff_s=0.0, max_backoff_s=0.0, max_retry_after_s=600, max_wait_s=max_wait_s)
    reasons: list[str | None] = []

    def give_up(failure: Failed, tries: int, why: str | None) -> Exception:
        reasons.append(why)
        return failure

    with pytest.raises(Failed):
        policy.run(call, Failed, give_up=give_up, sleep=waited.append)
    assert len(calls) == tries and waited == slept and sum(waited) <= (max_wait_s or 1e9)
    if tries < 4:
        assert "more than the" in str(reasons[0])


def test_no_wait_reaches_past_the_deadline():
    now = [100.0]
    waited: list[float] = []
    calls, call = failing(Failed(retry_after=2.0), Failed(retry_after=2.0), "ok")
    policy = RetryPolicy(retries=5, backoff_s=0.0, max_backoff_s=0.0, max_retry_after_s=600)

    def sleep(seconds: float) -> None:
        waited.append(seconds)
        now[0] += seconds

    with pytest.raises(Failed):
        policy.run(call, Failed, sleep=sleep, until=103.0, clock=lambda: now[0])
    assert len(calls) == 2 and waited == [2.0], "the second wait would end past the deadline: given up instead"
