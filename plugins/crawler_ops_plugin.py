"""The crawler_ops Airflow plugin: the status app in the api-server (linked from the UI) and the run listener.

The package itself (``plugins/crawler_ops/``) is listed in ``.airflowignore`` so the plugin manager does
not import its files a second time as top-level modules; only this file is a plugin module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from crawler_ops.ops import listener

URL_PREFIX = "/crawler-ops"


class StatusApp:
    """The status view (:mod:`crawler_ops.ops.web`), imported on its first request.

    Every Airflow process loads plugins, each task process included, and only the api-server serves this
    app: importing FastAPI and the view's Kafka, PostgreSQL and source clients up front would cost every
    task start about half a second.
    """

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        from crawler_ops.ops.web import app

        await app(scope, receive, send)


class CrawlerOpsPlugin(AirflowPlugin):
    name = "crawler_ops"
    # Airflow's plugin interface: class attributes.
    fastapi_apps = [{"app": StatusApp(), "url_prefix": URL_PREFIX, "name": "crawler_ops status"}]  # noqa: RUF012
    listeners = [listener]  # noqa: RUF012
    # Relative hrefs: the UI resolves them against its <base href>, so they work under an api base_url path.
    # The "dag" view is a tab on every DAG's page ({DAG_ID} filled in by the UI); it shows the crawl or executor
    # task of that DAG, or a note that the DAG is not one.
    external_views = [  # noqa: RUF012
        {
            "name": "Crawler status",
            "href": f"{URL_PREFIX.lstrip('/')}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "crawler_ops_status",
        },
        {
            "name": "Crawl status",
            "href": f"{URL_PREFIX.lstrip('/')}/?dag_id={{DAG_ID}}",
            "destination": "dag",
            "url_route": "crawler_ops_dag_status",
        },
    ]
