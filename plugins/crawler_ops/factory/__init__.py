"""Config -> DAG objects, one builder module per DAG kind: :mod:`.crawl` (``crawl_<id>``), :mod:`.executor`
(``exec_<name>``) and :mod:`.maintenance` (``crawler_ops_maintenance``); :mod:`.common` holds what they share.

No network or database access here: this runs at parse time. When a task process starts, only its own
DAG is built (``get_parsing_context``). An invalid task becomes a small DAG whose only task fails with
the validation message, so it is visible in the UI instead of silently missing.
"""

from __future__ import annotations

from crawler_ops.factory.crawl import build_crawl_dag, build_crawl_dags
from crawler_ops.factory.executor import build_executor_dag, build_executor_dags
from crawler_ops.factory.maintenance import build_maintenance_dag, build_maintenance_dags

__all__ = [
    "build_crawl_dag",
    "build_crawl_dags",
    "build_executor_dag",
    "build_executor_dags",
    "build_maintenance_dag",
    "build_maintenance_dags",
]
