"""The demo source's admin API: tasks created, appended to, truncated and deleted; faults, request logs, auth and
the ground truth the tests compare a topic with."""

from __future__ import annotations

import asyncio
from typing import Annotated

import msgspec

from demo_source.asgi import (
    HttpError,
    Request,
    Response,
    decode_body,
    json_response,
    query_float,
)
from demo_source.auth import AuthOptions, AuthState
from demo_source.data import (
    NO_FAULTS,
    Faults,
    NonNegativeInt,
    TaskConfig,
    TaskState,
    ground_truth,
    parse_ref,
    task_seed,
)
from demo_source.envelopes import EnvelopeOptions, Envelopes
from demo_source.feed import FeedOptions
from demo_source.order import OLDEST_FIRST, Order
from demo_source.paging import PagingOptions
from demo_source.runtime import TaskRuntime
from demo_source.window import WindowOptions


class TaskBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of ``PUT /admin/tasks/{task}``; omitted fields use defaults."""

    total: NonNegativeInt
    seed: int | None = None
    ref: str | None = None
    window_days: int = 7
    in_window_share: float = 0.3
    history_days: int = 365
    append_step_s: int = 60
    city_codes: bool = False
    paging: PagingOptions = msgspec.field(default_factory=PagingOptions)
    auth: AuthOptions | None = None
    feed: FeedOptions = msgspec.field(default_factory=FeedOptions)
    window: WindowOptions = msgspec.field(default_factory=WindowOptions)
    envelopes: EnvelopeOptions = msgspec.field(default_factory=EnvelopeOptions)
    order: Order = OLDEST_FIRST


class AppendBody(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST /admin/tasks/{task}/append``."""

    n: Annotated[int, msgspec.Meta(ge=0, le=1_000_000_000)]


class TruncateBody(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST /admin/tasks/{task}/truncate``."""

    total: NonNegativeInt


class AdminApi:
    """The admin routes of :class:`demo_source.app.DemoSource` (its tasks and page cache)."""

    async def list_tasks(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks``.

        :return: ``{"tasks": [ids...]}``.
        """
        return json_response({"tasks": sorted(self.tasks)})

    async def get_task(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}``.

        :return: the task's admin view.
        """
        runtime = self._task(request.task_id)
        return json_response(runtime.describe())

    async def put_task(self, request: Request) -> Response:
        """(Re)create a task from ``PUT /admin/tasks/{task}``.

        Faults, the request log and the counters start empty.

        :return: the task's admin view.
        :raises HttpError: 400 on an invalid configuration.
        """
        spec = decode_body(request.body, TaskBody)
        try:
            ref = self.default_ref if spec.ref is None else parse_ref(spec.ref)
            config = TaskConfig(
                total0=spec.total,
                seed=task_seed(request.task_id) if spec.seed is None else spec.seed,
                ref=ref,
                window_days=spec.window_days,
                in_window_share=spec.in_window_share,
                history_days=spec.history_days,
                append_step_s=spec.append_step_s,
                task_id=request.task_id,
                city_codes=spec.city_codes,
            )
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc
        auth = None if spec.auth is None else AuthState(spec.auth)
        created = TaskRuntime(
            request.task_id,
            TaskState(config),
            paging=spec.paging,
            auth=auth,
            feed=spec.feed,
            window=spec.window,
            envelopes=Envelopes(spec.envelopes),
            order=spec.order,
        )
        self.tasks[request.task_id] = created
        return json_response(created.describe())

    async def delete_task(self, request: Request) -> Response:
        """Forget a task: ``DELETE /admin/tasks/{task}`` (its data set, faults and request log; a later request
        for it meets a new task with the defaults).

        :return: ``{"deleted": true}``, or false when there was no such task.
        """
        return json_response({"deleted": self.tasks.pop(request.task_id, None) is not None})

    async def append(self, request: Request) -> Response:
        """Append records: ``POST /admin/tasks/{task}/append``.

        :return: ``{"total": new_total}``.
        """
        runtime = self._task(request.task_id)
        body = decode_body(request.body, AppendBody)
        return json_response({"total": runtime.state.append(body.n)})

    async def truncate(self, request: Request) -> Response:
        """Shrink the source: ``POST /admin/tasks/{task}/truncate``.

        :return: ``{"total": new_total}``.
        :raises HttpError: 400 if the new total is larger than the current one.
        """
        runtime = self._task(request.task_id)
        body = decode_body(request.body, TruncateBody)
        try:
            return json_response({"total": runtime.state.truncate(body.total)})
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc

    async def get_faults(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/faults``.

        :return: the active fault set.
        """
        runtime = self._task(request.task_id)
        return json_response(runtime.faults)

    async def put_faults(self, request: Request) -> Response:
        """Replace the fault set: ``PUT /admin/tasks/{task}/faults``.

        :return: the new fault set.
        """
        runtime = self._task(request.task_id)
        runtime.set_faults(decode_body(request.body, Faults))
        return json_response(runtime.faults)

    async def delete_faults(self, request: Request) -> Response:
        """Clear the fault set: ``DELETE /admin/tasks/{task}/faults``.

        :return: the (empty) fault set.
        """
        runtime = self._task(request.task_id)
        runtime.set_faults(NO_FAULTS)
        return json_response(runtime.faults)

    async def get_requests(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/requests``.

        :return: ``{"requests": [{"offset", "limit", "status"}...],
            "count": all list requests, "dropped": requests past the cap}``.
        """
        runtime = self._task(request.task_id)
        entries = [
            {"offset": offset, "limit": limit, "status": status, **(entry or {})}
            for offset, limit, status, entry in runtime.log
        ]
        return json_response(
            {
                "requests": entries,
                "count": len(entries) + runtime.log_dropped,
                "dropped": runtime.log_dropped,
            }
        )

    async def get_in_flight(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/in_flight``: the task's data requests (count and list) being answered
        now, and the most that were at once since the task was created or its request log cleared.

        :return: ``{"in_flight": n, "peak": most}``.
        """
        runtime = self._task(request.task_id)
        return json_response({"in_flight": runtime.in_flight, "peak": runtime.peak_in_flight})

    async def delete_requests(self, request: Request) -> Response:
        """Clear the request log: ``DELETE /admin/tasks/{task}/requests``.

        :return: ``{"cleared": number_of_entries_forgotten}``.
        """
        runtime = self._task(request.task_id)
        cleared = len(runtime.log) + runtime.log_dropped
        runtime.clear_requests()
        return json_response({"cleared": cleared})

    async def token(self, request: Request) -> Response:
        """Answer ``POST /oauth/{task}/token`` with the task's auth (404 for a task without OAuth2).

        :return: the token, or the OAuth2 error.
        """
        auth = self._auth(request.task_id)
        if auth.options.token_latency_ms:
            await asyncio.sleep(auth.options.token_latency_ms / 1000)
        status, answer = auth.grant(request.headers, request.body)
        return json_response(answer, status)

    async def get_auth(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/auth``: the token requests and refusals so far.

        :return: :meth:`AuthState.describe`.
        """
        return json_response(self._auth(request.task_id).describe())

    async def revoke_auth(self, request: Request) -> Response:
        """Revoke every access token of the task: ``POST /admin/tasks/{task}/auth/revoke``.

        :return: ``{"revoked": n}``.
        """
        return json_response({"revoked": self._auth(request.task_id).revoke()})

    def _auth(self, task_id: str) -> AuthState:
        runtime = self.tasks.get(task_id)
        if runtime is None or runtime.auth is None or runtime.auth.options.type != "oauth2":
            raise HttpError(404, f"task {task_id} has no OAuth2 auth")
        return runtime.auth

    async def truth(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/truth`` from the true dates.

        Query: ``ref`` (ISO, default the task's ref), ``days`` (default the
        task's window_days), ``tolerance_s`` (default 0).

        :return: ``in_window_ids``, ``in_window_count``, ``bad_date_ids``, ``total``.
        :raises HttpError: 400 on invalid parameters.
        """
        runtime = self._task(request.task_id)
        config = runtime.config
        days = query_float(request.query, "days", float(config.window_days))
        tolerance = query_float(request.query, "tolerance_s", 0.0)
        text = request.query.get("ref")
        try:
            ref = config.ref if text is None else parse_ref(text)
        except ValueError as exc:
            raise HttpError(400, "ref must be an ISO-8601 time") from exc
        truth = ground_truth(config, runtime.state.total, ref, days, tolerance, runtime.faults)
        return json_response(truth)
