"""The demo source's data API, as a crawled source serves it: ``/healthz``, the count, the pages (offsets, pages,
search, windows) and the feed of each task."""

from __future__ import annotations

import asyncio
from typing import Any, Final

import msgspec

from demo_source.asgi import (
    _ENCODER,
    HttpError,
    Request,
    Response,
    error_response,
    json_response,
    ok_response,
    query_int,
)
from demo_source.data import (
    make_page,
    make_record,
)
from demo_source.feed import serve_feed
from demo_source.order import OLDEST_FIRST, served_records
from demo_source.paging import PagingError, PagingOptions, Reader, shaped_body
from demo_source.runtime import TaskRuntime
from demo_source.window import page_offsets, view_count, window_of

MAX_LIMIT: Final[int] = 1000
DEFAULT_LIMIT: Final[int] = 100


def read_list(_options: PagingOptions, query: dict[str, str], _body: bytes) -> tuple[int, int, None]:
    """The offsets of ``GET /api/{task}/list?offset=&limit=``.

    :raises HttpError: 400 if one is not an integer.
    """
    return query_int(query, "offset", 0), query_int(query, "limit", DEFAULT_LIMIT), None


class DataApi:
    """The data routes of :class:`demo_source.app.DemoSource` (its tasks and page cache)."""

    async def healthz(self, request: Request) -> Response:
        """Answer the health check.

        :return: ``{"status": "ok"}``.
        """
        return json_response({"status": "ok"})

    async def count(self, request: Request) -> Response:
        """Answer ``GET /api/{task}/count`` (honours latency and error_rate).

        :return: the total in the success envelope, or an injected error.
        """
        runtime = self._task(request.task_id)
        if not runtime.paging.count:
            return error_response(404, f"not found: /api/{request.task_id}/count (this source has no count)")
        runtime.count("count")
        runtime.request_started()
        try:
            faults = runtime.faults
            if faults.latency_ms:
                await asyncio.sleep(faults.latency_ms / 1000)
            if runtime.draw(faults.error_rate):
                return error_response(faults.error_status, "injected error")
            window = window_of(request.query)
            if window is not None:
                return ok_response({"total": view_count(self._view(runtime, window), runtime.window)})
            return ok_response({"total": runtime.state.total})
        except ValueError as exc:
            return error_response(400, f"invalid from/to: {exc}")
        finally:
            runtime.request_finished()

    async def list_records(self, request: Request) -> Response:
        """Answer ``GET /api/{task}/list`` and log the outcome.

        :return: a page of records, or an error.
        """
        return await self.paged(request, read_list)

    async def _list_page(self, runtime: TaskRuntime, offset: int, limit: int) -> Response:
        """Apply validation and faults to a list request, then build the page.

        :param runtime: the task.
        :param offset: requested offset.
        :param limit: requested page size.
        :return: the response.
        :raises HttpError: 400 on an invalid offset or limit.
        """
        if offset < 0:
            raise HttpError(400, "offset must be >= 0")
        if not 1 <= limit <= MAX_LIMIT:
            raise HttpError(400, f"limit must be within [1, {MAX_LIMIT}]")
        faults = runtime.faults
        if faults.latency_ms:
            await asyncio.sleep(faults.latency_ms / 1000)
        runtime.fault_list_seq += 1
        if faults.rate_limit_every and runtime.fault_list_seq % faults.rate_limit_every == 0:
            retry = (b"retry-after", str(faults.retry_after_s).encode())
            return error_response(429, "rate limited", (retry,))
        total = runtime.state.total
        end = min(offset + limit, total)
        if runtime.fails_in(offset, end):
            return error_response(faults.fail_status, "injected failure at offset")
        if runtime.draw(faults.error_rate):
            return error_response(faults.error_status, "injected error")
        if faults.short_pages and end > offset and end - offset == limit:
            end -= 1
        return self._page_response(runtime, offset, end, total)

    def _page_response(self, runtime: TaskRuntime, start: int, end: int, total: int) -> Response:
        """Build a successful list response, applying shape/malformed faults.

        :param runtime: the task.
        :param start: first offset served.
        :param end: one past the last offset served.
        :param total: total reported in the envelope.
        :return: the response.
        """
        records = self._encoded_records(runtime, start, end)
        faults, headers = runtime.faults, ()
        if faults.wrong_shape:
            body = b'{"code":0,"data":{"items":' + records + b"}}"
        else:
            body, headers = shaped_body(runtime.paging.body, records, total)
        if runtime.paging.total_header:
            headers = (*headers, (b"x-total-count", str(total).encode()))
        if runtime.draw(faults.malformed_rate):
            body = body[: max(1, len(body) // 2)]
        return Response(200, body, headers)

    def _encoded_records(self, runtime: TaskRuntime, start: int, end: int) -> bytes:
        """Return the JSON array of records ``start .. end - 1`` (cached).

        :param runtime: the task.
        :param start: first offset.
        :param end: one past the last offset.
        :return: the encoded array.
        """
        if end <= start:
            return b"[]"
        if runtime.order != OLDEST_FIRST:  # each append moves every record: not cached
            return _ENCODER.encode(
                served_records(runtime.config, start, end, runtime.state.total, runtime.order, runtime.faults)
            )
        key = (runtime.generation, start, end)
        encoded = self.cache.get(key)
        if encoded is None:
            encoded = _ENCODER.encode(make_page(runtime.config, start, end, runtime.faults))
            self.cache.put(key, encoded)
        return encoded

    async def paged(self, request: Request, read: Reader) -> Response:
        """Answer a page request (``/list``, or a route of :mod:`demo_source.paging`) with the offsets its reader finds
        in the request, and log the outcome.

        :return: a page of records, or an error.
        """
        runtime = self._task(request.task_id)
        offset: int | None = None
        limit: int | None = None
        entry: dict[str, Any] | None = None
        runtime.request_started()
        try:
            offset, limit, entry = read(runtime.paging, request.query, request.body)
            window = window_of(request.query)
            enveloped = await runtime.envelopes.answer(offset, limit, runtime.auth)
            if enveloped:
                response = Response(200, enveloped)
            elif window is None:
                response = await self._list_page(runtime, offset, limit)
            else:
                entry = {**(entry or {}), "from": request.query["from"], "to": request.query["to"]}
                response = self._view_page(runtime, window, offset, limit)
        except PagingError as exc:
            entry, response = exc.entry, error_response(400, str(exc))
        except HttpError as exc:
            response = error_response(exc.status, exc.msg)
        except ValueError as exc:
            response = error_response(400, f"invalid from/to: {exc}")
        finally:
            runtime.request_finished()
        runtime.record_list(offset, limit, response.status, entry)
        return response

    async def feed(self, request: Request) -> Response:
        """Answer ``GET /api/{task}/feed`` (:mod:`demo_source.feed`) and log it."""
        runtime = self._task(request.task_id)
        host = request.headers.get(b"host", b"").decode()
        query = request.query
        if request.method == "POST":  # the same members in a JSON body; a null cursor asks the first page
            try:
                body = msgspec.json.decode(request.body or b"{}", type=dict[str, str | int | None])
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                return error_response(400, f"invalid body: {exc}")
            query = {name: str(value) for name, value in body.items() if value is not None}
        answer = serve_feed(runtime.config, runtime.state.total, runtime.feed, query, host, runtime.faults)
        if request.method == "POST":
            answer.entry.update(method="POST", body=query)
        runtime.record_list(answer.offset, answer.served, answer.status, answer.entry)
        return Response(answer.status, answer.body, answer.headers)

    def _view(self, runtime: TaskRuntime, window: tuple[int, int]) -> list[int]:
        """The offsets of the task's records dated in ``window`` (:mod:`demo_source.window`)."""
        return runtime.views.offsets(runtime.config, runtime.generation, runtime.state.total, window)

    def _view_page(self, runtime: TaskRuntime, window: tuple[int, int], offset: int, limit: int) -> Response:
        """Records ``[offset, offset + limit)`` of the filtered view of ``window`` (``total``: the view's size)."""
        if offset < 0 or not 1 <= limit <= MAX_LIMIT:
            raise HttpError(400, f"offset must be >= 0 and limit within [1, {MAX_LIMIT}]")
        view = self._view(runtime, window)
        records = [
            make_record(runtime.config, o, runtime.faults) for o in page_offsets(view, offset, limit, runtime.window)
        ]
        return ok_response({"total": len(view), "data": records})
