"""Raw ASGI application serving the demo job postings source.

All state lives in memory in a :class:`DemoSource` instance. Routes:

* ``GET /healthz``
* ``GET /api/{task}/count`` and ``GET /api/{task}/list?offset=&limit=``
* ``GET /admin/tasks`` and ``GET|PUT|DELETE /admin/tasks/{task}``
* ``POST /admin/tasks/{task}/append`` and ``POST /admin/tasks/{task}/truncate``
* ``GET|PUT|DELETE /admin/tasks/{task}/faults``
* ``GET|DELETE /admin/tasks/{task}/requests``
* ``GET /admin/tasks/{task}/in_flight`` (data requests being answered now, and the most at once)
* ``GET /admin/tasks/{task}/truth?ref=&days=&tolerance_s=``
* the paging modes of :mod:`demo_source.paging`: ``GET /api/{task}/pages``, ``POST /api/{task}/search``, and a
  count endpoint that answers 404 (a task's ``paging`` options)
* ``GET /api/{task}/feed`` (or ``POST`` with the query's members in a JSON body): the records newest first, each
  page naming the next by a cursor, a next link or a Link header (a task's ``feed`` options,
  :mod:`demo_source.feed`)
* ``from`` and ``to`` on the page routes and ``/count``: the records dated in a window (``demo_source.window``)
* ``POST /oauth/{task}/token``, ``GET /admin/tasks/{task}/auth``, ``POST /admin/tasks/{task}/auth/revoke``: a task
  created with ``auth`` wants it on its ``/api`` requests (``demo_source.auth``)
* error codes in HTTP 200 bodies, and pages too large or too slow unless asked smaller (a task's ``envelopes``
  options, :mod:`demo_source.envelopes`)

With an admin token (``DEMO_SOURCE_ADMIN_TOKEN``, which ``dev/stack.py`` sets) every ``/admin`` route wants
``Authorization: Bearer <token>`` and answers 401 without it.

Every body is JSON; errors are ``{"code": <status>, "msg": "..."}``.

Here: routing and the admin token. The handlers are :class:`~demo_source.data_api.DataApi` (what a crawler reads)
and :class:`~demo_source.admin_api.AdminApi` (what the tests and benchmarks set up and read back); a task's state is
:class:`~demo_source.runtime.TaskRuntime`; the ASGI plumbing is :mod:`demo_source.asgi`.
"""

from __future__ import annotations

import functools
import hmac
import logging
from datetime import datetime
from typing import Final
from urllib.parse import parse_qsl

from demo_source.admin_api import AdminApi
from demo_source.asgi import (
    Handler,
    HttpError,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    error_response,
    read_body,
    send_response,
)
from demo_source.data import (
    TaskConfig,
    TaskState,
    task_seed,
    utc_midnight,
)
from demo_source.data_api import DataApi
from demo_source.paging import ROUTES as PAGING_ROUTES
from demo_source.runtime import PAGE_CACHE_BYTES, PageCache, TaskRuntime

_API_PARTS: Final[int] = 3
_ADMIN_TASK_PARTS: Final[int] = 3
logger = logging.getLogger(__name__)


class DemoSource(DataApi, AdminApi):
    """The ASGI application; one instance holds all tasks in memory (routes: :class:`DataApi`, :class:`AdminApi`)."""

    def __init__(self, default_total: int, default_ref: datetime | None, admin_token: str | None = None) -> None:
        """Create the application.

        :param default_total: ``total0`` of tasks created on first sight.
        :param default_ref: their reference time (default: today's UTC midnight).
        :param admin_token: when set, every ``/admin/...`` request must carry ``Authorization: Bearer <token>``
            (else 401); ``/api`` and ``/healthz`` stay open, as a crawled source's are.
        """
        self.admin_authorization = None if admin_token is None else f"Bearer {admin_token}".encode()
        if default_total < 0:
            msg = "default_total must be >= 0"
            raise ValueError(msg)
        self.default_total = default_total
        self.default_ref = utc_midnight() if default_ref is None else default_ref
        self.tasks: dict[str, TaskRuntime] = {}
        self.cache = PageCache(PAGE_CACHE_BYTES)
        self._routes = self._build_routes()

    def _build_routes(self) -> dict[tuple[str, ...], dict[str, Handler]]:
        """Map path patterns (``"*"`` = task id) to handlers per method.

        :return: the routing table.
        """
        return {
            ("healthz",): {"GET": self.healthz},
            ("api", "*", "count"): {"GET": self.count},
            ("api", "*", "list"): {"GET": self.list_records},
            ("api", "*", "feed"): {"GET": self.feed, "POST": self.feed},
            ("admin", "tasks"): {"GET": self.list_tasks},
            ("admin", "tasks", "*"): {"GET": self.get_task, "PUT": self.put_task, "DELETE": self.delete_task},
            ("admin", "tasks", "*", "append"): {"POST": self.append},
            ("admin", "tasks", "*", "truncate"): {"POST": self.truncate},
            ("admin", "tasks", "*", "faults"): {
                "GET": self.get_faults,
                "PUT": self.put_faults,
                "DELETE": self.delete_faults,
            },
            ("admin", "tasks", "*", "requests"): {
                "GET": self.get_requests,
                "DELETE": self.delete_requests,
            },
            ("admin", "tasks", "*", "truth"): {"GET": self.truth},
            ("admin", "tasks", "*", "in_flight"): {"GET": self.get_in_flight},
            **{
                pattern: {method: functools.partial(self.paged, read=read) for method, read in readers.items()}
                for pattern, readers in PAGING_ROUTES.items()
            },
            ("oauth", "*", "token"): {"POST": self.token},
            ("admin", "tasks", "*", "auth"): {"GET": self.get_auth},
            ("admin", "tasks", "*", "auth", "revoke"): {"POST": self.revoke_auth},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point.

        :param scope: connection scope.
        :param receive: ASGI receive callable.
        :param send: ASGI send callable.
        """
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            response = await self._dispatch(scope, receive)
        except HttpError as exc:
            response = error_response(exc.status, exc.msg)
        except Exception as exc:
            logger.exception("unhandled error on %s %s", scope["method"], scope["path"])
            response = error_response(500, f"internal error: {type(exc).__name__}")
        await send_response(send, response)

    async def _dispatch(self, scope: Scope, receive: Receive) -> Response:
        """Route a request to its handler.

        :param scope: connection scope.
        :param receive: ASGI receive callable.
        :return: the response.
        :raises HttpError: 404 / 405 / 413 / 400 on routing or body errors.
        """
        parts = tuple(part for part in scope["path"].split("/") if part)
        if parts[:1] == ("admin",) and not self._admin_allowed(scope):
            return error_response(401, "the admin API wants the stack's token", ((b"www-authenticate", b"Bearer"),))
        index = _task_index(parts)
        pattern = tuple("*" if i == index else p for i, p in enumerate(parts))
        methods = self._routes.get(pattern)
        if methods is None:
            raise HttpError(404, f"not found: {scope['path']}")
        handler = methods.get(scope["method"])
        if handler is None:
            raise HttpError(405, f"method {scope['method']} not allowed")
        body = await read_body(receive) if scope["method"] in ("PUT", "POST") else b""
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        task_id = parts[index] if index is not None else ""
        headers = dict(scope.get("headers", ()))
        auth = self.tasks[task_id].auth if parts[0] == "api" and task_id in self.tasks else None
        if auth is not None and not auth.allows(headers, query):
            if expired := self.tasks[task_id].envelopes.expired():
                return Response(200, expired)
            return error_response(401, "missing, expired or unknown credentials", ((b"www-authenticate", b"Bearer"),))
        return await handler(Request(scope["method"], task_id, query, body, headers))

    def _admin_allowed(self, scope: Scope) -> bool:
        """Whether the request may use the admin API: no token configured, or the right one sent."""
        if self.admin_authorization is None:
            return True
        sent = dict(scope.get("headers", ())).get(b"authorization", b"")
        return hmac.compare_digest(sent, self.admin_authorization)

    def _task(self, task_id: str) -> TaskRuntime:
        """Return a task's runtime, creating it with defaults on first sight.

        :param task_id: the task id.
        :return: the runtime.
        """
        runtime = self.tasks.get(task_id)
        if runtime is None:
            config = TaskConfig(
                total0=self.default_total,
                seed=task_seed(task_id),
                ref=self.default_ref,
                task_id=task_id,
            )
            runtime = TaskRuntime(task_id, TaskState(config))
            self.tasks[task_id] = runtime
        return runtime


def _task_index(parts: tuple[str, ...]) -> int | None:
    """Return where the task id sits in a split path, if anywhere.

    :param parts: the non-empty path segments.
    :return: 1 for ``/api/{task}/...``, 2 for ``/admin/tasks/{task}...``, else ``None``.
    """
    if len(parts) == _API_PARTS and parts[0] in ("api", "oauth"):
        return 1
    if len(parts) >= _ADMIN_TASK_PARTS and parts[:2] == ("admin", "tasks"):
        return 2
    return None


async def _lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge ASGI lifespan start-up and shutdown.

    :param receive: ASGI receive callable.
    :param send: ASGI send callable.
    """
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_app(default_total: int, default_ref: datetime | None, admin_token: str | None = None) -> DemoSource:
    """Create the demo source ASGI application.

    :param default_total: ``total0`` of tasks first seen without a PUT.
    :param default_ref: their reference time; ``None`` means the current UTC
        day's midnight.
    :param admin_token: the token the admin API wants (``None``: the admin API is open).
    :return: the ASGI callable.
    """
    return DemoSource(default_total, default_ref, admin_token)
