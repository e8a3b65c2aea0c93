"""The session's check that no crawler_ops code sleeps with a transaction open (tests/held_sleeps.py) sees one."""

from __future__ import annotations

import time

import psycopg
import pytest

from crawler_ops.retry import RetryPolicy
from tests import held_sleeps

pytestmark = pytest.mark.integration


class Flaky(Exception):
    retriable = True


def test_a_retry_sleeping_inside_a_transaction_is_found_and_one_outside_is_not(pg_uri: str) -> None:
    tries = iter([Flaky(), None, Flaky(), None])

    def call() -> str:
        failure = next(tries)
        if failure is not None:
            raise failure
        return "ok"

    policy = RetryPolicy(retries=1, backoff_s=0.001, max_backoff_s=0.001, max_retry_after_s=1)
    with psycopg.connect(pg_uri) as db:
        with db.transaction():
            db.execute("SELECT 1")
            assert policy.run(call, Flaky, sleep=time.sleep) == "ok"
        found = held_sleeps.take()
        assert policy.run(call, Flaky, sleep=time.sleep) == "ok"

    assert len(found) == 1 and found[0].startswith("crawler_ops.retry slept"), found
    assert held_sleeps.take() == [], "outside the transaction: nothing"
