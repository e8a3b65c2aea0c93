"""The Airflow pool of each source connection: ``crawler_source_<conn_id>`` with ``max_in_flight`` slots.

Each ``plan`` and ``crawl_chunk`` on the connection takes one slot (:attr:`crawler_ops.config.SourceConfig.pool_slots`),
so at most ``max_in_flight`` steps of a source run at once over every worker, and the UI (Admin → Pools) shows how
many do; the requests they have in flight are bounded by permits shared through PostgreSQL
(:mod:`crawler_ops.hooks.source.flight`), so many small steps of one source run side by side. Tasks on one connection
share its pool; when they give different ``max_in_flight`` values, the pool gets the largest.

Airflow 3's task processes have no metadata-DB access, and neither the Task SDK nor its Execution API can create a
pool, so a crawl task cannot create its own. The pools are created where the metadata DB is: by the plugin's
listener in the scheduler when a crawl run starts (:func:`ensure_pool_of`: a missing pool is created, one smaller
than the config is grown, never shrunk; the scheduler leaves tasks of a missing or too small pool scheduled), and at
deploy time by ``crawler-ops pools --apply`` (``airflow-init``), which also shrinks existing ones to the config;
``crawler-ops pools`` prints them in the format of ``airflow pools import``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from crawler_ops.config import CrawlTaskConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourcePool:
    name: str
    slots: int
    conn_id: str

    @property
    def description(self) -> str:
        return (
            f"steps running on source connection {self.conn_id} (source.max_in_flight); each plan and "
            "crawl_chunk takes one slot, and permits in PostgreSQL bound their requests in flight"
        )


def source_pools(tasks: Iterable[CrawlTaskConfig]) -> dict[str, SourcePool]:
    """The pool of every source connection whose requests in flight are bounded, by pool name."""
    pools: dict[str, SourcePool] = {}
    for task in tasks:
        name, slots = task.source.pool, task.source.max_in_flight
        if name is None or slots is None:
            continue
        known = pools.get(name)
        pools[name] = SourcePool(name, max(slots, known.slots if known else 0), task.source.conn_id)
    return pools


def pools_document(pools: Iterable[SourcePool]) -> dict[str, Any]:
    """The pools as ``airflow pools import`` reads them (the format of ``include/deploy/pools.json``)."""
    return {p.name: {"slots": p.slots, "description": p.description, "include_deferred": False} for p in pools}


def apply_pools(pools: Iterable[SourcePool], shrink: bool = True) -> list[str]:
    """Create the pools missing from Airflow's metadata DB and set existing ones to their slots (with ``shrink``
    False, only grow them: a pool smaller than a task's slots would never run it); returns what changed. Needs
    metadata-DB access (the scheduler, ``airflow-init``), not a task process."""
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    changed = []
    with create_session() as session:
        for pool in pools:
            known = Pool.get_pool(pool.name, session=session)
            if known is not None and (known.slots == pool.slots or (known.slots > pool.slots and not shrink)):
                continue
            Pool.create_or_update_pool(pool.name, pool.slots, pool.description, False, session=session)
            changed.append(f"{pool.name}: {pool.slots} slots" + ("" if known is None else f" (was {known.slots})"))
    return changed


def ensure_pool_of(dag_id: str) -> None:
    """Create the source pool of the crawl DAG ``dag_id`` when it is missing (the tasks of a pool that does not exist
    are never scheduled); existing pools are left as they are."""
    from crawler_ops.config import load_config

    tasks = load_config().tasks
    task = next((t for t in tasks if t.dag_id == dag_id), None)
    if task is None:
        log.warning(
            "crawler_ops: %s is not in the config the scheduler reads (CRAWLER_OPS_CONFIG); its source pool is not "
            "checked here: run crawler-ops pools --apply where the config is",
            dag_id,
        )
        return
    if task.source.pool is None:
        return
    on_conn = [t for t in tasks if t.source.conn_id == task.source.conn_id]
    for change in apply_pools(source_pools(on_conn).values(), shrink=False):
        log.warning("crawler_ops: source pool %s (a run of %s needs it)", change, dag_id)
