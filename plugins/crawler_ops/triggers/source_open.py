"""The trigger a deferred crawl chunk waits on: it fires once the chunk's source connection is open again.

A chunk whose request must wait longer than ``source.defer_after_s`` (a Retry-After, a pause or a queue of the
connection's shared rate limit) stops after its last finished batch and defers
(:class:`~crawler_ops.operators.crawl.CrawlChunkOperator`): its worker slot and its slot of the source's pool go back
to the fleet while :class:`SourceOpenTrigger` waits in Airflow's triggerer, one coroutine among many. The trigger
waits the time the source asked for, then asks PostgreSQL how far the connection's next request slot is
(``crawler_ops.source_rate``, the row every worker paces by): a 429 another worker met meanwhile pushed it further,
and the trigger waits on. It fires once the next slot is within ``within_s``, and the chunk resumes at the batch it
stopped at, which the event carries back. It asks at most every :data:`POLL_S` seconds, and fires ``max_wait_s``
after the time asked at the latest: a crawler database that does not answer cannot hold a chunk forever (its
requests then meet the rate limit as any request does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from crawler_ops.config import SourceConfig

log = logging.getLogger(__name__)

CLASSPATH = "crawler_ops.triggers.source_open.SourceOpenTrigger"
#: The longest sleep between two looks at the clock or at the connection's row.
POLL_S = 30.0


class SourceOpenTrigger(BaseTrigger):
    """Fires when a paused source connection may be asked again.

    :param source: the task's source config, as JSON.
    :param postgres_conn_id: Airflow connection of the crawler database (None: no shared rate limit to ask).
    :param not_before: the time (epoch seconds) the source asked to wait until.
    :param within_s: fire once the connection's next request slot is at most this far.
    :param max_wait_s: fire this long after ``not_before`` whatever the row says.
    :param resume: where the chunk goes on, handed back in the event (``airflow dags test`` resumes a task with the
        event alone).
    """

    def __init__(
        self,
        source: dict[str, Any],
        postgres_conn_id: str | None,
        not_before: float,
        within_s: float,
        max_wait_s: float,
        resume: dict[str, Any],
    ) -> None:
        super().__init__()
        self.source = source
        self.postgres_conn_id = postgres_conn_id
        self.not_before = not_before
        self.within_s = within_s
        self.max_wait_s = max_wait_s
        self.resume = resume

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "source": self.source,
            "postgres_conn_id": self.postgres_conn_id,
            "not_before": self.not_before,
            "within_s": self.within_s,
            "max_wait_s": self.max_wait_s,
            "resume": self.resume,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        give_up = self.not_before + self.max_wait_s
        while True:
            wait = self.not_before - time.time()
            if wait <= 0:
                wait = await self.opens_in()
            now = time.time()
            if wait <= self.within_s or now >= give_up:
                late_s = round(now - self.not_before, 3)
                yield TriggerEvent({"source": self.source.get("conn_id"), "late_s": late_s, "resume": self.resume})
                return
            await asyncio.sleep(max(0.0, min(wait, POLL_S, give_up - now)))

    async def opens_in(self) -> float:
        """Seconds until the connection's next request slot (0 without a shared rate limit); :data:`POLL_S` when the
        crawler database does not answer."""
        if self.postgres_conn_id is None or self.source.get("requests_per_s") is None:
            return 0.0
        try:
            return await asyncio.to_thread(self.ask)
        except Exception as exc:  # noqa: BLE001 - asked again after POLL_S, and fired at max_wait_s at the latest
            log.warning(
                "source %s: could not read its rate limit: %s: %s", self.source.get("conn_id"), type(exc).__name__, exc
            )
            return POLL_S

    def ask(self) -> float:
        from crawler_ops.hooks.source.ratelimit import SourceRateStore

        store = SourceRateStore(self.postgres_conn_id or "", SourceConfig.model_validate(self.source))
        try:
            return store.opens_in()
        finally:
            store.close()
