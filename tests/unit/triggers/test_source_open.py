"""A deferred chunk's trigger: when it fires (the wait asked for, then the connection's next request slot, at the
latest ``max_wait_s`` after the wait), and what it hands back."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.triggers import source_open
from crawler_ops.triggers.source_open import CLASSPATH, POLL_S, SourceOpenTrigger

RESUME = {"index": 4, "counts": {"kept": 7}, "elapsed_s": 1.5, "deferrals": 1, "stalls": 0}


def trigger(not_before: float, *, limited: bool = True, within_s: float = 5.0, max_wait_s: float = 600.0) -> Any:
    source = SourceConfig(conn_id="src", requests_per_s=10 if limited else None).model_dump(mode="json")
    return SourceOpenTrigger(source, "crawler_db", not_before, within_s, max_wait_s, RESUME)


def first_event(tr: SourceOpenTrigger) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async for event in tr.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(run())


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The trigger's sleeps, recorded; the clock moves by each."""
    sleeps: list[float] = []
    now = [time.time()]

    async def sleep(seconds: float) -> None:
        sleeps.append(round(seconds, 3))
        now[0] += seconds

    monkeypatch.setattr(source_open.asyncio, "sleep", sleep)
    monkeypatch.setattr(source_open.time, "time", lambda: now[0])
    return sleeps


def asks(monkeypatch: pytest.MonkeyPatch, answers: list[float]) -> list[float]:
    """The row's answers to the trigger's asks, in turn (the last one repeats); returns the answers given."""
    given: list[float] = []

    def ask(self: SourceOpenTrigger) -> float:
        given.append(answers[min(len(given), len(answers) - 1)])
        return given[-1]

    monkeypatch.setattr(SourceOpenTrigger, "ask", ask)
    return given


def test_it_waits_the_time_asked_for_then_fires_once_the_next_slot_is_near_and_hands_back_where_to_resume(
    monkeypatch, slept
):
    given = asks(monkeypatch, [45.0, 12.0, 3.0])

    event = first_event(trigger(time.time() + 50))

    assert slept == [POLL_S, 20.0, POLL_S, 12.0], "the wait asked for (in POLL_S steps), then each answer"
    assert given == [45.0, 12.0, 3.0], "fired once the next slot was within 5 s"
    assert event["resume"] == RESUME and event["source"] == "src"


def test_without_a_shared_rate_limit_it_fires_when_the_wait_is_over(monkeypatch, slept):
    given = asks(monkeypatch, [999.0])

    event = first_event(trigger(time.time() + 8, limited=False))

    assert slept == [8.0] and given == [], "no row to ask"
    assert event["late_s"] == 0.0


def test_a_crawler_database_that_does_not_answer_cannot_hold_the_chunk_past_max_wait_s(monkeypatch, slept):
    def ask(self: SourceOpenTrigger) -> float:
        raise OSError("connection refused")

    monkeypatch.setattr(SourceOpenTrigger, "ask", ask)

    event = first_event(trigger(time.time(), max_wait_s=100))

    assert slept == [POLL_S, POLL_S, POLL_S, 10.0], "asked again every POLL_S, fired at max_wait_s"
    assert event["late_s"] == 100.0


def test_it_serializes_to_what_builds_it_again():
    tr = trigger(1_800_000_000.0)
    classpath, kwargs = tr.serialize()

    assert classpath == CLASSPATH
    assert SourceOpenTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert kwargs["resume"] == RESUME and kwargs["not_before"] == 1_800_000_000.0
