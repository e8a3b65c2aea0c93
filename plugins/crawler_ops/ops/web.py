"""The status view inside Airflow's api-server: a FastAPI app mounted at ``/crawler-ops`` by the plugin.

``GET /crawler-ops/api/status[?task=ID&live=false&history=true]`` returns the JSON of ``python -m crawler_ops
status --json`` (``history``: also each task's run in progress and last runs); ``GET /crawler-ops/[?task=ID]``
renders it, with the history as charts, from the Jinja2 templates in ``templates/`` (the Airflow UI frames it
from Browse -> Crawler status), and ``GET /crawler-ops/?dag_id=DAG`` shows one DAG's task (the UI's DAG tab).
Both need an Airflow login (the UI's session cookie or ``Authorization: Bearer <JWT>``), and a user sees
only the tasks whose DAG runs they may read (with the DAG's team in Airflow's multi-team mode).

The routes are sync, so each request holds a thread of the api-server's pool, which Airflow's own API shares:
a report is answered within the status deadline, the same question is answered from a cache
(:mod:`crawler_ops.ops.report_cache`) for ``REPORT_TTL_S`` (one report for every user, filtered per user when served),
and at most ``MAX_LIVE_REPORTS`` live reports are gathered at once; a request beyond that gets the last answer to its
question, however old, or 503 at once, instead of a thread waiting for its turn. A ``live=false`` question is gathered
once at a time (who asks meanwhile waits for that answer, within the deadline), at most ``MAX_REPORTS`` such reports
at once.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from crawler_ops.config import CrawlTaskConfig, LoadedConfig, broken_dag_id, current_config
from crawler_ops.errors import ConfigError
from crawler_ops.ops.charts import run_charts
from crawler_ops.ops.check import check_within
from crawler_ops.ops.check_runner import CheckRunner, UserBusyError
from crawler_ops.ops.check_text import render_text as render_check
from crawler_ops.ops.report_cache import BusyError, ReportCache
from crawler_ops.ops.status import STATUS_DEADLINE_S, collect

log = logging.getLogger(__name__)

# "Check source": a task's check is run once at a time and its answer given again for CHECK_TTL_S, at most
# MAX_CHECKS checks at once and one per user, each within CHECK_DEADLINE_S.
CHECK_TTL_S = 60.0
MAX_CHECKS = 2
CHECK_DEADLINE_S = 30.0


REPORTS = ReportCache()
CHECKS = CheckRunner(ttl_s=CHECK_TTL_S, most=MAX_CHECKS)
TEMPLATES = Path(__file__).resolve().parent / "templates"


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
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'; base-uri 'none'; form-action 'self'"
    ),
}


@app.middleware("http")
async def security_headers(request: Request, call_next: Any) -> Any:
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response


def visible_report(
    user: Any, task: str | None, live: bool, *, executor: str | None = None, history: bool = False
) -> dict[str, Any]:
    """The status report restricted to the DAGs ``user`` may read.

    A task's row carries its runs, so it needs read access to the DAG's runs; a task's config error names only
    its DAG, so it needs read access to that DAG. In multi-team mode each DAG is checked with its team, as
    Airflow's own endpoints do. A config that does not load at all may quote any part of the YAML: only a user
    who may read every DAG sees why (no one in multi-team mode), everyone else gets a generic error. Every check
    fails closed (:class:`DagReader`): an entry whose DAG no bundle parsed is shown to no one in multi-team mode,
    and a user whose permissions cannot be determined sees nothing.
    """
    end = time.monotonic() + STATUS_DEADLINE_S
    try:
        # Names only: looking for a transform's or function's module imports its parent packages, which would run
        # user code inside the api-server (it holds the JWT secret and the metadata DB's address).
        loaded = current_config()
    except ConfigError as exc:
        if may_read_every_dag(user):
            raise HTTPException(status_code=500, detail=f"crawler_ops config: {exc}") from exc
        raise HTTPException(status_code=500, detail=GENERIC_CONFIG_ERROR) from exc
    visible = visible_entries(user, loaded)
    try:
        report = REPORTS.report(
            (task, executor, live, history),
            live,
            lambda: collect(loaded, task, live=live, executor=executor, history=history, end=end),
            end,
        )
        return restrict(report, visible, task, executor)
    except KeyError as exc:
        what = f"crawl task '{task}'" if executor is None else f"executor '{executor}'"
        raise HTTPException(status_code=404, detail=f"no {what} visible to you") from exc
    except BusyError as exc:
        raise HTTPException(
            status_code=503,
            detail=f"busy: {exc}; try again in a few seconds, or ask with live=false",
            headers={"Retry-After": "5"},
        ) from exc


def visible_entries(user: Any, loaded: LoadedConfig) -> dict[str, frozenset[str]]:
    """The task ids, invalid task labels, executor names and invalid executor labels of ``loaded`` whose DAG
    ``user`` may read (the runs of it, for valid entries)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    broken = {k: broken_dag_id(k) for k in loaded.errors}
    broken_executors = {k: broken_dag_id(k, "exec_") for k in loaded.executor_errors}
    may_read = DagReader(
        user,
        [t.dag_id for t in loaded.tasks]
        + [e.dag_id for e in loaded.executors]
        + list(broken.values())
        + list(broken_executors.values()),
    )
    return {
        "tasks": frozenset(t.id for t in loaded.tasks if may_read(t.dag_id, DagAccessEntity.RUN)),
        "errors": frozenset(k for k in loaded.errors if may_read(broken[k])),
        "executors": frozenset(e.name for e in loaded.executors if may_read(e.dag_id, DagAccessEntity.RUN)),
        "executor_errors": frozenset(k for k in loaded.executor_errors if may_read(broken_executors[k])),
    }


def restrict(
    report: dict[str, Any], visible: dict[str, frozenset[str]], task: str | None, executor: str | None
) -> dict[str, Any]:
    """The rows of ``report`` (built for every entry, maybe for another user) that ``visible`` lets its user see.

    :raises KeyError: ``task`` or ``executor`` was asked for and the user may see none of it.
    """
    shown = {
        **report,
        "tasks": [row for row in report["tasks"] if row["task_id"] in visible["tasks"]],
        "invalid_tasks": [bad for bad in report["invalid_tasks"] if bad["task_id"] in visible["errors"]],
        "executors": [row for row in report["executors"] if row["name"] in visible["executors"]],
        "invalid_executors": [bad for bad in report["invalid_executors"] if bad["name"] in visible["executor_errors"]],
    }
    if task is not None and not shown["tasks"] and not shown["invalid_tasks"]:
        raise KeyError(task)
    if executor is not None and not shown["executors"] and not shown["invalid_executors"]:
        raise KeyError(executor)
    return shown


GENERIC_CONFIG_ERROR = "crawler_ops config is invalid; ask an Airflow administrator for the details"


class DagReader:
    """Answers whether ``user`` may read a DAG (or one kind of its details), asking the auth manager with the
    DAG's team the way Airflow's ``requires_access_dag`` does; it fails closed.

    In multi-team mode a DAG that no bundle parsed has no team, and Airflow's auth managers let every team read what
    is asked about without a team: such a DAG (a config entry not parsed yet) is shown to no one. A question the
    auth manager cannot answer (it raises, or answers anything but True), or teams that cannot be looked up, mean
    "no": a user whose permissions cannot be determined sees nothing.

    :param user: the logged-in Airflow user
    :param dag_ids: the DAGs that will be asked about; their teams are looked up in one query
    """

    def __init__(self, user: Any, dag_ids: list[str]) -> None:
        from airflow.api_fastapi.app import get_auth_manager

        self.user = user
        self.auth_manager = get_auth_manager()
        self.multi_team = multi_team()
        self.teams: dict[str, str | None] | None = {}
        if self.multi_team:
            try:
                self.teams = dag_teams(dag_ids)
            except Exception as exc:  # noqa: BLE001 - unknown teams: nothing is shown, the reason is logged
                log.warning("status: cannot look up the teams of the crawl DAGs, showing none: %s", exc)
                self.teams = None

    def __call__(self, dag_id: str, access_entity: Any = None) -> bool:
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        if self.multi_team and (self.teams is None or dag_id not in self.teams):
            return False
        team = None if self.teams is None else self.teams.get(dag_id)
        try:
            answer = self.auth_manager.is_authorized_dag(
                method="GET", access_entity=access_entity, details=DagDetails(id=dag_id, team_name=team), user=self.user
            )
        except Exception as exc:  # noqa: BLE001 - an unanswered question is a "no"
            log.warning("status: the auth manager cannot tell whether %s may read %s: %s", self.user, dag_id, exc)
            return False
        return answer is True


def may_read_every_dag(user: Any) -> bool:
    """Whether ``user`` may read every DAG (fails closed). Never in multi-team mode: Airflow's auth managers answer a
    question without a DAG as one without a team, which every team may read."""
    from airflow.api_fastapi.app import get_auth_manager

    if multi_team():
        return False
    try:
        return get_auth_manager().is_authorized_dag(method="GET", user=user) is True
    except Exception as exc:  # noqa: BLE001 - an unanswered question is a "no"
        log.warning("status: the auth manager cannot tell whether %s may read every DAG: %s", user, exc)
        return False


def multi_team() -> bool:
    from airflow.configuration import conf

    return conf.getboolean("core", "multi_team", fallback=False)


def dag_teams(dag_ids: list[str]) -> dict[str, str | None]:
    """The team owning each parsed DAG of ``dag_ids`` (through its bundle; None: a bundle without a team) in
    multi-team mode; a DAG no bundle parsed is absent."""
    from airflow.models.dag import DagModel

    if not dag_ids:
        return {}
    ids = sorted(set(dag_ids))
    teams = DagModel.get_dag_id_to_team_name_mapping(ids)
    return {dag_id: teams.get(dag_id) for dag_id in parsed_dags(ids)}


def parsed_dags(dag_ids: list[str]) -> set[str]:
    """The DAGs of ``dag_ids`` that some bundle parsed (they have a row in Airflow's metadata DB)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))))


@app.get("/api/status")
def status_json(
    user: User,
    task: Annotated[str | None, Query(description="only this crawl task id")] = None,
    live: Annotated[bool, Query(description="ask the sources and Kafka too")] = True,
    history: Annotated[bool, Query(description="also the run in progress and the last runs of each task")] = False,
) -> dict[str, Any]:
    return visible_report(user, task, live, history=history)


@app.get("/", response_class=HTMLResponse)
def status_page(user: User, task: str | None = None, live: bool = True, dag_id: str | None = None) -> str:
    if dag_id is None:
        return render_html(visible_report(user, task, live, history=True), filtered=task is not None)
    crawl_task, executor = dag_target(dag_id)
    if crawl_task is None and executor is None:
        return render_html(empty_report(), dag_id=dag_id, note=not_ours(dag_id))
    try:
        report = visible_report(user, crawl_task, live, executor=executor, history=True)
    except HTTPException as exc:
        if exc.status_code != 404:
            raise
        return render_html(empty_report(), dag_id=dag_id, note=not_ours(dag_id))
    return render_html(report, dag_id=dag_id, filtered=True)


def check_target(user: Any, request: Request, task: str) -> CrawlTaskConfig:
    """The config of ``task``, for a user who may read its DAG's runs, asked from the status view itself."""
    # A form on another site, or on another origin of this one, must not make us ask a source.
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise HTTPException(status_code=403, detail="a source check is started from the status view only")
    try:
        loaded = current_config()
    except ConfigError as exc:
        raise HTTPException(status_code=500, detail=GENERIC_CONFIG_ERROR) from exc
    cfg = next((t for t in loaded.tasks if t.id == task), None)
    if cfg is None or task not in visible_entries(user, loaded)["tasks"]:
        raise HTTPException(status_code=404, detail=f"no crawl task '{task}' visible to you")
    return cfg


async def checked(user: Any, request: Request, task: str) -> dict[str, Any]:
    """The source check of ``task`` (``crawler-ops check``) for a user who may read its DAG's runs (:data:`CHECKS`:
    one check per task at a time, its answer given again for ``CHECK_TTL_S``, at most ``MAX_CHECKS`` at once and one
    per user; 503 or 429 at once beyond). Nothing here holds a thread of the api-server while a source answers."""
    cfg = await run_in_threadpool(check_target, user, request, task)
    try:
        return await CHECKS.report(task, user_key(user), lambda: check_within(cfg, CHECK_DEADLINE_S))
    except UserBusyError as exc:
        raise HTTPException(
            status_code=429, detail=f"{exc}; wait for its answer", headers={"Retry-After": "10"}
        ) from exc
    except BusyError as exc:
        raise HTTPException(
            status_code=503, detail=f"busy: {exc}; try again in a few seconds", headers={"Retry-After": "10"}
        ) from exc


def user_key(user: Any) -> str:
    """Who a user is, for counting their checks."""
    get_id = getattr(user, "get_id", None)
    return str(get_id() if callable(get_id) else getattr(user, "username", None) or getattr(user, "name", id(user)))


@app.post("/api/check")
async def check_json(user: User, request: Request, task: str) -> dict[str, Any]:
    return await checked(user, request, task)


@app.post("/check", response_class=HTMLResponse)
async def check_page(user: User, request: Request, task: str) -> str:
    report = await checked(user, request, task)
    return await run_in_threadpool(render_check_page, report)


def render_check_page(report: dict[str, Any]) -> str:
    """The check's page (its sample message parsed and indented: off the event loop)."""
    return TEMPLATE_ENV.get_template("check.html").render(
        report=report, text=render_check(report), sample=readable_message(report.get("sample_message"))
    )


def readable_message(message: dict[str, Any] | None) -> str:
    """A sample message for the page: topic, key and headers, then its value indented when it is JSON."""
    if message is None:
        return ""
    try:
        value = json.dumps(json.loads(message["value"]), ensure_ascii=False, indent=2)
    except ValueError:
        value = message["value"]
    headers = "\n".join(f"  {name}: {text}" for name, text in message["headers"])
    return f"topic: {message['topic']}\nkey: {message['key']}\nheaders:\n{headers}\nvalue:\n{value}"


def dag_target(dag_id: str) -> tuple[str | None, str | None]:
    """The crawl task id or the executor name a DAG id stands for (by the prefixes the factory gives them);
    whether it is configured, and visible, is the report's business."""
    crawl, executor = dag_id.removeprefix("crawl_"), dag_id.removeprefix("exec_")
    return (crawl or None) if crawl != dag_id else None, (executor or None) if executor != dag_id else None


def not_ours(dag_id: str) -> str:
    return f"{dag_id} is not a crawl or executor DAG of crawler_ops that you may read: there is no crawl status here."


def empty_report() -> dict[str, Any]:
    return {"generated_at": datetime.now(UTC).isoformat(), "tasks": [], "invalid_tasks": []}


# The Airflow UI may serve this app under a base_url path: every link in the templates is relative.
TEMPLATE_ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(["html"], default_for_string=True, default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

COLUMNS = (
    "task",
    "running",
    "status",
    "source total",
    "watermark",
    "last start offset",
    "filtered / produced",
    "last update",
    "last run",
    "field drift",
    "errors 24h",
    "parked batches",
    "kafka",
)


def render_html(
    report: dict[str, Any], *, dag_id: str | None = None, note: str | None = None, filtered: bool = False
) -> str:
    """The status page of ``report``; each task with a ``history`` gets its charts. ``dag_id`` and ``note``
    title the page of the UI's DAG tab; ``filtered``: the page shows part of the tasks (links back to all)."""
    tasks = [
        {**row, "history": {**row["history"], "charts": run_charts(row["history"]["runs"])}}
        if row.get("history") is not None
        else row
        for row in report["tasks"]
    ]
    tasks_shown = [row["task_id"] for row in tasks]
    json_href = "api/status" + (f"?task={quote(tasks_shown[0])}" if filtered and len(tasks_shown) == 1 else "")
    return TEMPLATE_ENV.get_template("status.html").render(
        report={**report, "tasks": tasks},
        columns=COLUMNS,
        dag_id=dag_id,
        note=note,
        filtered=filtered or dag_id is not None,
        json_href=json_href,
    )
