"""The status view inside Airflow's api-server: a FastAPI app mounted at ``/crawler-ops`` by the plugin.

``GET /crawler-ops/api/status[?task=ID&live=false]`` returns the JSON of ``python -m crawler_ops status
--json``; ``GET /crawler-ops/`` renders it as a small HTML page (linked from the Airflow UI's navigation).
Both need an Airflow login (the UI's session cookie or ``Authorization: Bearer <JWT>``), and a user sees
only the tasks whose DAG runs they may read (with the DAG's team in Airflow's multi-team mode).

The routes are sync, so each request holds a thread of the api-server's pool, which Airflow's own API shares:
a report is answered within the status deadline, the same question is answered from a cache for
``REPORT_TTL_S``, and at most ``MAX_LIVE_REPORTS`` live reports are gathered at once; a request beyond that gets
the last answer to its question, however old, or 503 at once, instead of a thread waiting for its turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from html import escape
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from crawler_ops.config import broken_dag_id, load_config
from crawler_ops.errors import ConfigError
from crawler_ops.status import STATUS_DEADLINE_S, collect

URL_PREFIX = "/crawler-ops"  # where crawler_ops_plugin mounts this app
REPORT_TTL_S = 20.0
MAX_LIVE_REPORTS = 2
# Answers kept for requests that find every live slot taken; older ones are dropped.
STALE_AFTER_S = 600.0


class BusyError(Exception):
    """Every live slot is taken and the question was never answered before."""


class ReportCache:
    """Recent status reports by question, and a cap on the live reports gathered at once.

    :param ttl_s: an answer younger than this is given again without asking anyone.
    :param max_live: live reports gathered at once; a request beyond it never waits.
    """

    def __init__(self, ttl_s: float = REPORT_TTL_S, max_live: int = MAX_LIVE_REPORTS) -> None:
        self.ttl_s = ttl_s
        self.slots = threading.BoundedSemaphore(max_live)
        self.max_live = max_live
        self.lock = threading.Lock()
        self.answers: dict[Hashable, tuple[float, dict[str, Any]]] = {}

    def report(self, key: Hashable, live: bool, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The answer to ``key``: a fresh one from the cache, else ``build()`` (for a live report only while a slot
        is free; else the last answer, however old).

        :raises BusyError: every live slot is taken and ``key`` was never answered.
        """
        with self.lock:
            known = self.answers.get(key)
        if known is not None and time.monotonic() - known[0] < self.ttl_s:
            return known[1]
        if not live:
            return self.keep(key, build())
        if not self.slots.acquire(blocking=False):
            if known is not None:
                return known[1]
            raise BusyError(f"{self.max_live} live status reports are being gathered")
        try:
            return self.keep(key, build())
        finally:
            self.slots.release()

    def keep(self, key: Hashable, answer: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            self.answers = {k: v for k, v in self.answers.items() if now - v[0] < STALE_AFTER_S}
            self.answers[key] = (now, answer)
        return answer


REPORTS = ReportCache()


async def current_user(request: Request) -> Any:
    """The logged-in Airflow user, exactly as the REST API resolves it (401 without a valid login).

    Imported here, not at module level: every task process loads plugins (for macros), and the api-server's
    security module would cost each task start half a second.
    """
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    return await get_user(request, None, await bearer_scheme(request))


User = Annotated[Any, Depends(current_user)]

# Every route needs a login; no unauthenticated docs or schema either.
app = FastAPI(
    title="crawler_ops status",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
    dependencies=[Depends(current_user)],
)


# The page needs no script and no resource from elsewhere; Airflow's own UI may frame it.
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
    ),
}


@app.middleware("http")
async def security_headers(request: Request, call_next: Any) -> Any:
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response


def visible_report(user: Any, task: str | None, live: bool) -> dict[str, Any]:
    """The status report restricted to the DAGs ``user`` may read.

    A task's row carries its runs, so it needs read access to the DAG's runs; a task's config error names only
    its DAG, so it needs read access to that DAG. In multi-team mode each DAG is checked with its team, as
    Airflow's own endpoints do. A config that does not load at all may quote any part of the YAML: only a user
    who may read every DAG sees why, everyone else gets a generic error.
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    end = time.monotonic() + STATUS_DEADLINE_S
    try:
        loaded = load_config(check_imports=True)
    except ConfigError as exc:
        if get_auth_manager().is_authorized_dag(method="GET", user=user):
            raise HTTPException(status_code=500, detail=f"crawler_ops config: {exc}") from exc
        raise HTTPException(status_code=500, detail=GENERIC_CONFIG_ERROR) from exc
    broken = {k: broken_dag_id(k) for k in loaded.errors}
    broken_executors = {k: broken_dag_id(k, "exec_") for k in loaded.executor_errors}
    may_read = DagReader(
        user,
        [t.dag_id for t in loaded.tasks]
        + [e.dag_id for e in loaded.executors]
        + list(broken.values())
        + list(broken_executors.values()),
    )
    tasks = tuple(t for t in loaded.tasks if may_read(t.dag_id, DagAccessEntity.RUN))
    errors = {k: v for k, v in loaded.errors.items() if may_read(broken[k])}
    executors = tuple(e for e in loaded.executors if may_read(e.dag_id, DagAccessEntity.RUN))
    executor_errors = {k: v for k, v in loaded.executor_errors.items() if may_read(broken_executors[k])}
    visible = {"tasks": tasks, "errors": errors, "executors": executors, "executor_errors": executor_errors}
    # The question: what is asked, of the entries this user may see (a config change shows within the TTL).
    seen = (tuple(t.id for t in tasks), tuple(errors), tuple(e.name for e in executors), tuple(executor_errors))
    try:
        return REPORTS.report(
            (task, live, seen), live, lambda: collect(loaded.model_copy(update=visible), task, live=live, end=end)
        )
    except KeyError as exc:
        raise HTTPException(status_code=404, detail=f"no crawl task '{task}' visible to you") from exc
    except BusyError as exc:
        raise HTTPException(
            status_code=503,
            detail=f"busy: {exc}; try again in a few seconds, or ask with live=false",
            headers={"Retry-After": "5"},
        ) from exc


GENERIC_CONFIG_ERROR = "crawler_ops config is invalid; ask an Airflow administrator for the details"


class DagReader:
    """Answers whether ``user`` may read a DAG (or one kind of its details), asking the auth manager with the
    DAG's team the way Airflow's ``requires_access_dag`` does.

    :param user: the logged-in Airflow user
    :param dag_ids: the DAGs that will be asked about; their teams are looked up in one query
    """

    def __init__(self, user: Any, dag_ids: list[str]) -> None:
        from airflow.api_fastapi.app import get_auth_manager

        self.user = user
        self.auth_manager = get_auth_manager()
        self.teams = dag_teams(dag_ids)

    def __call__(self, dag_id: str, access_entity: Any = None) -> bool:
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        return bool(
            self.auth_manager.is_authorized_dag(
                method="GET",
                access_entity=access_entity,
                details=DagDetails(id=dag_id, team_name=self.teams.get(dag_id)),
                user=self.user,
            )
        )


def dag_teams(dag_ids: list[str]) -> dict[str, str | None]:
    """The team owning each DAG (through its bundle) in multi-team mode; a DAG not (yet) parsed has none."""
    from airflow.configuration import conf

    if not dag_ids or not conf.getboolean("core", "multi_team", fallback=False):
        return {}
    from airflow.models.dag import DagModel

    return DagModel.get_dag_id_to_team_name_mapping(sorted(set(dag_ids)))


@app.get("/api/status")
def status_json(
    user: User,
    task: Annotated[str | None, Query(description="only this crawl task id")] = None,
    live: Annotated[bool, Query(description="ask the sources and Kafka too")] = True,
) -> dict[str, Any]:
    return visible_report(user, task, live)


@app.get("/", response_class=HTMLResponse)
def status_page(user: User, task: str | None = None, live: bool = True) -> str:
    return render_html(visible_report(user, task, live))


COLUMNS = (
    ("task", lambda r: f"{escape(r['task_id'])}<br><small>{escape(str(r['task_name']))}</small>"),
    ("running", lambda r: {True: "yes", False: "no"}.get(r.get("running"), f"? {r.get('running_error', '')}".strip())),
    ("status", lambda r: r.get("status") if not r.get("db_error") else f"database: {r['db_error']}"),
    ("source total", lambda r: r["source_total"] if r.get("source_total") is not None else r.get("source_error", "-")),
    ("watermark", lambda r: f"{r.get('watermark')} ({r['progress']})"),
    ("last start offset", lambda r: r.get("last_start_offset")),
    ("filtered / produced", lambda r: f"{r.get('filtered_count', 0)} / {r.get('produced_count', 0)}"),
    ("last update", lambda r: r.get("last_update")),
    ("last run", lambda r: run_cell(r.get("last_run"))),
    ("errors 24h", lambda r: errors_cell(r.get("errors_24h"))),
    ("parked batches", lambda r: "<br>".join(escape(str(p)) for p in r.get("parked") or ()) or "0"),
    ("kafka", lambda r: kafka_cell(r.get("kafka"))),
)


def run_cell(run: dict[str, Any] | None) -> str:
    if not run:
        return "-"
    head = escape(f"{run['status']} ({run['mode']}, {run['duration_s']}s)")
    return (
        f"{head}<br><small>{escape(str(run['run_id']))}<br>fetched {run['fetched']} kept {run['kept']} "
        f"published {run['published']} dead {run['dead_lettered']}</small>"
    )


def errors_cell(errors: dict[str, Any] | None) -> str:
    if not errors or not (errors.get("records") or errors.get("batches")):
        return "0"
    return f"{errors['records']} records, {errors['batches']} batches<br><small>{escape(str(errors['latest']))}</small>"


def kafka_cell(kafka: dict[str, Any] | None) -> str:
    if kafka is None:
        return "-"
    if "messages" not in kafka:
        return escape(str(kafka.get("error")))
    lags = "".join(
        f"<br>{escape(g)}: lag {v['lag']}" if "lag" in v else f"<br>{escape(g)}: {escape(v['error'])}"
        for g, v in sorted(kafka.get("groups", {}).items())
    )
    return f"{kafka['messages']} messages{lags}"


def render_html(report: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(name)}</th>" for name, _ in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{cell(row) if name in RICH else escape(str(cell(row)))}</td>" for name, cell in COLUMNS)
        for row in report["tasks"]
    )
    invalid = "".join(
        f"<p class=bad><b>{escape(b['task_id'])}</b>: {escape(b['error'])}</p>" for b in report["invalid_tasks"]
    ) + "".join(
        f"<p class=bad><b>executor {escape(b['name'])}</b>: {escape(b['error'])}</p>"
        for b in report.get("invalid_executors", [])
    )
    return (
        "<!doctype html><html><head><meta charset=utf-8><meta http-equiv=refresh content=30>"
        "<title>crawler_ops status</title><style>body{font-family:sans-serif;margin:1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;"
        "text-align:left}small{color:#555}.bad{color:#b00}</style></head><body>"
        f"<h2>crawler_ops status</h2><p><small>{escape(report['generated_at'])} &middot; JSON: "
        f"<a href='{URL_PREFIX}/api/status'>{URL_PREFIX}/api/status</a> &middot; refreshes every 30 s</small></p>"
        f"<table><tr>{head}</tr>{rows}</table>{executors_html(report.get('executors', []))}{invalid}</body></html>"
    )


def executors_html(executors: list[dict[str, Any]]) -> str:
    """A table of executors: rows per status and the latest parked rows with their errors."""
    if not executors:
        return ""
    cells = []
    for row in executors:
        counts = (
            escape(row["db_error"])
            if row.get("db_error")
            else escape(", ".join(f"{k} {v}" for k, v in row["rows"].items()))
        )
        parked = "".join(
            f"<br><small>{p['id']} ({p['attempts']} attempts, {escape(str(p['failed_at']))}): "
            f"{escape(str(p['last_error']))}</small>"
            for p in row.get("parked", [])
        )
        cells.append(
            f"<tr><td>{escape(row['name'])}<br><small>{escape(row['dag_id'])}</small></td>"
            f"<td>{escape(row['status_table'])}</td><td>{counts}</td><td>{len(row.get('parked', []))}{parked}</td></tr>"
        )
    head = "<tr><th>executor</th><th>status table</th><th>rows</th><th>parked (latest)</th></tr>"
    return f"<h3>Executors</h3><table>{head}{''.join(cells)}</table>"


# Cells that build their own (escaped) HTML.
RICH = {"task", "last run", "errors 24h", "parked batches", "kafka"}
