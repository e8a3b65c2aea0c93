"""Paging modes of the demo source besides offset/limit: a page-number endpoint, a POST search, no count endpoint.

Per task, in the body of ``PUT /admin/tasks/{task}``: ``"paging": {"first_page": 1, "page_size": null,
"count": true}``:

* ``first_page``: the number of the first page (0 or 1);
* ``page_size``: null, the ``page_size`` parameter decides (default 100); a number: every page holds that many
  records whatever is asked (a fixed page size);
* ``count``: false makes ``GET /api/{task}/count`` answer 404, as a source without a count endpoint does.

Routes (records ``0 .. total - 1``, oldest first; page ``first_page`` holds the oldest ``page_size``):

* ``GET /api/{task}/pages?page=&page_size=``
* ``POST /api/{task}/search`` with a JSON body ``{"offset": , "limit": }`` or ``{"page": , "page_size": }``

Both answer like ``/list`` (same envelope, faults and request log); each log entry also says ``method``,
``route``, and ``page`` and ``page_size`` or the search ``body``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

if TYPE_CHECKING:
    from demo_source.app import DemoSource, Handler, Request, Response, TaskRuntime

DEFAULT_PAGE_SIZE = 100


class PagingOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A task's paging options (see the module doc)."""

    first_page: Annotated[int, msgspec.Meta(ge=0, le=1)] = 1
    page_size: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
    count: bool = True


class SearchBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Body of ``POST /api/{task}/search``: offset and limit, or page and page_size."""

    offset: int | None = None
    limit: int | None = None
    page: int | None = None
    page_size: int | None = None


def paging_routes(app: DemoSource) -> dict[tuple[str, ...], dict[str, Handler]]:
    """The routes of the paging modes, bound to ``app``."""

    async def pages(request: Request) -> Response:
        runtime = app._task(request.task_id)
        query = request.query
        try:
            page = int(query.get("page", runtime.paging.first_page))
            asked = int(query.get("page_size", DEFAULT_PAGE_SIZE))
        except ValueError:
            return await serve(app, runtime, None, {"method": "GET", "route": "pages", "query": dict(query)})
        return await serve(app, runtime, (page, asked), {"method": "GET", "route": "pages"})

    async def search(request: Request) -> Response:
        runtime = app._task(request.task_id)
        entry: dict[str, Any] = {"method": "POST", "route": "search"}
        try:
            body = msgspec.json.decode(request.body or b"{}", type=SearchBody)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return await serve(app, runtime, None, {**entry, "body": None})
        entry["body"] = msgspec.to_builtins(body)
        if body.page is not None:
            return await serve(app, runtime, (body.page, body.page_size or DEFAULT_PAGE_SIZE), entry)
        if body.offset is None or body.limit is None:
            return await serve(app, runtime, None, entry)
        return await serve(app, runtime, None, entry, (body.offset, body.limit))

    return {("api", "*", "pages"): {"GET": pages}, ("api", "*", "search"): {"POST": search}}


async def serve(
    app: DemoSource,
    runtime: TaskRuntime,
    page: tuple[int, int] | None,
    entry: dict[str, Any],
    offsets: tuple[int, int] | None = None,
) -> Response:
    """Answer a page (``(number, asked size)``) or an offset range like ``/list`` does, and log it with ``entry``.
    Neither (a request that did not parse) is a 400."""
    from demo_source.app import HttpError, error_response

    offset = limit = None
    runtime.request_started()
    try:
        if page is not None:
            number, asked = page
            size = runtime.paging.page_size or asked
            entry |= {"page": number, "page_size": size}
            if number < runtime.paging.first_page:
                raise HttpError(400, f"page must be >= {runtime.paging.first_page}")
            offset, limit = (number - runtime.paging.first_page) * size, size
        elif offsets is not None:
            offset, limit = offsets
        else:
            raise HttpError(400, "give page (and page_size), or offset and limit, as integers")
        response = await app._list_page(runtime, offset, limit)
    except HttpError as exc:
        response = error_response(exc.status, exc.msg)
    finally:
        runtime.request_finished()
    runtime.record_list(offset, limit, response.status, entry)
    return response
