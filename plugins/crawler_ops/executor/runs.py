"""An executor's runs and rows as operators see them: the run summary, parked rows, un-parking."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.executor.tables import executor_hook, resolve_tables
from crawler_ops.executor.worker import WorkerCounts
from crawler_ops.hooks.store.status_table import STATUS_NAMES

log = logging.getLogger(__name__)
PARKED_SHOWN = 20


def iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def summarize(cfg: ExecutorTaskConfig, run_id: str, results: Sequence[Mapping[str, int]]) -> dict[str, Any]:
    """Give back claims this run's workers left behind, close the run's quota, count the rows per status."""
    hook = executor_hook(cfg)
    with hook.transaction(lock=True) as cur:
        rows = resolve_tables(cur, cfg).rows(cfg.name)
        released = rows.release_owner(cur, run_id, run_id)
        rows.close_run(cur, run_id)
        counts = rows.counts(cur)
    totals = {key: sum(int(r.get(key, 0)) for r in results) for key in asdict(WorkerCounts())}
    return {
        "executor": cfg.name,
        "run_id": run_id,
        "workers_finished": len(results),
        "run": totals,
        "released_claims": released,
        "status": counts,
    }


@dataclass(frozen=True)
class Unparked:
    """What an un-park did: the rows now pending again, and asked-for ids that were not parked (id -> status
    name, or ``missing``)."""

    unparked: list[int]
    not_parked: dict[int, str]


def unpark(cfg: ExecutorTaskConfig, ids: Sequence[int] | None = None) -> Unparked:
    """Parked rows of the executor (all, or those of ``ids``) back to pending with a fresh attempt count."""
    hook = executor_hook(cfg)
    try:
        with hook.transaction(lock=True) as cur:
            rows = resolve_tables(cur, cfg).rows(cfg.name)
            unparked = rows.unpark(cur, ids)
            others = [i for i in ids or () if i not in set(unparked)]
            statuses = rows.statuses(cur, others)
    finally:
        hook.close()
    log.info("executor %s: unparked %d rows %s", cfg.name, len(unparked), unparked[:50])
    not_parked = {i: STATUS_NAMES.get(statuses[i], str(statuses[i])) if i in statuses else "missing" for i in others}
    return Unparked(unparked, not_parked)


def executor_status(cfg: ExecutorTaskConfig, limit: int = PARKED_SHOWN) -> dict[str, Any]:
    """Rows per status and the latest parked rows (with their errors) of one executor, for the status view."""
    row: dict[str, Any] = {"name": cfg.name, "dag_id": cfg.dag_id, "status_table": cfg.status_table}
    hook = executor_hook(cfg)
    try:
        with hook.transaction() as cur:
            rows = resolve_tables(cur, cfg).rows(cfg.name)
            row["rows"] = rows.counts(cur)
            row["parked"] = [{**p, "failed_at": iso(p["failed_at"])} for p in rows.parked(cur, limit)]
    except Exception as exc:  # noqa: BLE001 - one executor's database problem must not hide the others
        row["db_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        hook.close()
    return row
