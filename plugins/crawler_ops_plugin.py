"""The crawler_ops Airflow plugin: the status app in the api-server (linked from the UI) and the run listener.

The package itself (``plugins/crawler_ops/``) is listed in ``.airflowignore`` so the plugin manager does
not import its files a second time as top-level modules; only this file is a plugin module.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from crawler_ops import listener
from crawler_ops.web import URL_PREFIX, app


class CrawlerOpsPlugin(AirflowPlugin):
    name = "crawler_ops"
    # Airflow's plugin interface: class attributes.
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "crawler_ops status"}]  # noqa: RUF012
    listeners = [listener]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "Crawler status",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "crawler_ops_status",
        }
    ]
