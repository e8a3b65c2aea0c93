"""Waiting in tests: poll a condition until it holds, with a deadline that fails naming what was awaited. A test
waits for what it needs (a row, a file, a thread gone), never for a fixed time; the deadline only bounds a
failure, so it is generous and never part of what the test asserts."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call ``check`` until it returns something true, and return that.

    :param timeout: seconds after which the wait fails.
    :param what: the condition awaited, for the failure message.
    :raises AssertionError: ``check`` was still false after ``timeout`` seconds (checked once more at the end).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def python_calls(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and the number of Python function calls (generator resumptions included) it made: a
    measure of work that does not depend on the machine's speed."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(previous)
    return result, calls
