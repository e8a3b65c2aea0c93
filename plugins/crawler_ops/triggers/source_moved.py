"""The event trigger that starts a watched crawl task's runs when its source moved.

A task with ``watch:`` has a watch Asset of its own whose :class:`~airflow.sdk.AssetWatcher` runs
:class:`SourceMovedTrigger` in Airflow's triggerer, one coroutine a task on the triggerer's event loop. Every
``watch.every_s`` the trigger asks the source for its total (in a thread: through the task's auth, the connection's
shared rate limit and requests in flight, and its deadlines, as a crawl asks) and fires the Asset when
:func:`should_announce` says so: the total is not the one the task's last commit saw, and it was not announced
already (unless ``watch.refire_s`` passed since). The crawl DAG is scheduled on that Asset, so a run exists only when
there is something to plan.

A poll is a count request and two statements: the watches of one triggerer process share, per source connection,
one keep-alive HTTP client and the connection's limiter (whose PostgreSQL connections stay open while a watch holds
it), and one connection to the crawler database for their rows; each watch keeps its source hook from its first
poll to its cleanup.

What was announced is kept in PostgreSQL (``crawler_ops.source_watch``) after the event is handed to the triggerer:
a triggerer that restarts compares with it and with the last commit, so a change made while it was down is
announced on its first ask, and an event lost with a triggerer that died before handing it on is announced again
after ``refire_s``. A source that fails to answer is logged and asked again at the next poll; the trigger never ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from crawler_ops.config import SourceConfig
from crawler_ops.hooks.store.watch import WatchState, WatchStoreHook

if TYPE_CHECKING:
    import httpx

    from crawler_ops.hooks.source.hook import SourceApiHook
    from crawler_ops.hooks.source.tokens import SharedToken

log = logging.getLogger(__name__)

CLASSPATH = "crawler_ops.triggers.source_moved.SourceMovedTrigger"


def should_announce(total: int, state: WatchState, refire_s: float) -> bool:
    """Whether a total the source just gave is news: not the one the last commit saw, and not announced already
    within ``refire_s`` (a run for it is on its way)."""
    if total == state.committed:
        return False
    recent = state.age_s is not None and state.age_s < refire_s
    return not (state.announced == total and recent)


class SourceMovedTrigger(BaseEventTrigger):
    """Fires a watched crawl task's Asset when its source's total moved.

    :param crawl_task: the crawl task's id.
    :param source_task: the source's id of the task's data set (``{task}`` in its paths).
    :param source: the task's source config, as JSON.
    :param postgres_conn_id: Airflow connection of the crawler database.
    :param every_s: seconds between two asks.
    :param refire_s: seconds after which a total announced and not committed is announced again.
    """

    def __init__(
        self,
        crawl_task: str,
        source_task: str,
        source: dict[str, Any],
        postgres_conn_id: str,
        every_s: float,
        refire_s: float,
    ) -> None:
        super().__init__()
        self.crawl_task = crawl_task
        self.source_task = source_task
        self.source = source
        self.postgres_conn_id = postgres_conn_id
        self.every_s = every_s
        self.refire_s = refire_s
        self._hook: SourceApiHook | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "crawl_task": self.crawl_task,
            "source_task": self.source_task,
            "source": self.source,
            "postgres_conn_id": self.postgres_conn_id,
            "every_s": self.every_s,
            "refire_s": self.refire_s,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                news = await asyncio.to_thread(self.poll)
            except Exception as exc:  # noqa: BLE001 - a source or database down: asked again at the next poll
                log.warning(
                    "watch of task %s: could not ask the source: %s: %s", self.crawl_task, type(exc).__name__, exc
                )
                news = None
            if news is not None:
                yield TriggerEvent(news)
                try:
                    await asyncio.to_thread(self.keep, news["total"])
                except Exception as exc:  # noqa: BLE001 - not kept: announced again on the next ask, a run more
                    log.warning("watch of task %s: could not keep the announcement: %s", self.crawl_task, exc)
            await asyncio.sleep(self.every_s)

    def poll(self) -> dict[str, Any] | None:
        """One ask of the source's total, compared with the task's rows: the event's payload when it is news."""
        total = self.hook().get_total()
        state = watch_store(self.postgres_conn_id).read(self.crawl_task)
        if not should_announce(total, state, self.refire_s):
            return None
        log.info(
            "watch of task %s: the source's total is %d (last commit saw %s)", self.crawl_task, total, state.committed
        )
        return {"task": self.crawl_task, "total": total, "committed": state.committed}

    def keep(self, total: int) -> None:
        """The announcement of ``total``, kept once the triggerer has the event."""
        watch_store(self.postgres_conn_id).announced(self.crawl_task, total)

    def hook(self) -> SourceApiHook:
        """The task's source hook, built on the first poll and kept: the process's client, limiter and token of the
        source connection."""
        if self._hook is None:
            from crawler_ops.hooks.source.hook import SourceApiHook
            from crawler_ops.hooks.source.ratelimit import limiter_for
            from crawler_ops.hooks.source.tokens import token_for

            source = SourceConfig.model_validate(self.source)
            token = token_for(source, self.postgres_conn_id)
            limiter = limiter_for(source, self.postgres_conn_id)
            client = shared_client(source, self.postgres_conn_id, token)
            self._hook = SourceApiHook(
                source, self.crawl_task, self.source_task, limiter=limiter, token=token, client=client
            )
        return self._hook

    async def cleanup(self) -> None:
        if self._hook is not None:
            self._hook.close()  # lets go of the limiter; the shared client stays for the process's other watches
            self._hook = None


_shared_lock = threading.Lock()
_stores: dict[str, WatchStoreHook] = {}
_clients: dict[tuple[str, str], httpx.Client] = {}


def watch_store(postgres_conn_id: str) -> WatchStoreHook:
    """The watched tasks' rows on one connection for every watch of the process."""
    with _shared_lock:
        store = _stores.get(postgres_conn_id)
        if store is None:
            store = _stores[postgres_conn_id] = WatchStoreHook(postgres_conn_id)
        return store


def shared_client(source: SourceConfig, postgres_conn_id: str, token: SharedToken | None) -> httpx.Client:
    """One keep-alive HTTP client per source connection (and its settings) for every watch of the process: a poll
    sends its count request on a connection already open instead of building a client (and a TLS context)."""
    from crawler_ops.hooks.source.hook import SourceApiHook, http_client

    key = (postgres_conn_id, source.model_dump_json())
    with _shared_lock:
        client = _clients.get(key)
        if client is None:
            conn = SourceApiHook.get_connection(source.conn_id)
            client = _clients[key] = http_client(conn, source, source.conn_id, token)
        return client
