"""Paging modes of the demo source besides offset/limit: a page-number endpoint, a POST search, no count endpoint.

Per task, in the body of ``PUT /admin/tasks/{task}``: ``"paging": {"first_page": 1, "page_size": null,
"count": true}``:

* ``first_page``: the number of the first page (0 or 1);
* ``page_size``: null, the ``page_size`` parameter decides (default 100); a number: every page holds that many
  records whatever is asked (a fixed page size);
* ``count``: false makes ``GET /api/{task}/count`` answer 404, as a source without a count endpoint does;
* ``body``: how a page's body holds its records: ``envelope`` (``{"code": 0, "msg": "ok", "data": {"total": ,
  "data": [...]}}``), ``list`` (the bare JSON array of the records, GitHub style), ``jsonl`` (JSON Lines: one record
  per line, ``application/x-ndjson``);
* ``total_header``: every page answer carries the task's total in ``X-Total-Count``.

Routes (records ``0 .. total - 1``, oldest first; page ``first_page`` holds the oldest ``page_size``):

* ``GET /api/{task}/pages?page=&page_size=``
* ``POST /api/{task}/search`` with a JSON body ``{"offset": , "limit": }`` or ``{"page": , "page_size": }``

Both answer like ``/list`` (same envelope, faults and request log; ``DemoSource.paged`` serves them from what the
readers here make of a request); each log entry also says ``method``, ``route``, and ``page`` and ``page_size`` or
the search ``body``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec

DEFAULT_PAGE_SIZE = 100


class PagingOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A task's paging options (see the module doc)."""

    first_page: Annotated[int, msgspec.Meta(ge=0, le=1)] = 1
    page_size: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
    count: bool = True
    body: Literal["envelope", "list", "jsonl"] = "envelope"
    total_header: bool = False


class SearchBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Body of ``POST /api/{task}/search``: offset and limit, or page and page_size."""

    offset: int | None = None
    limit: int | None = None
    page: int | None = None
    page_size: int | None = None


class PagingError(ValueError):
    """A request of the paging routes that asks no records (a 400); ``entry``: what of it the log keeps."""

    def __init__(self, msg: str, entry: dict[str, Any]) -> None:
        super().__init__(msg)
        self.entry = entry


#: What a paging route makes of a request (the task's options, the query, the body): offset, limit, log entry.
Reader = Callable[[PagingOptions, dict[str, str], bytes], tuple[int, int, dict[str, Any] | None]]


def read_pages(options: PagingOptions, query: dict[str, str], _body: bytes) -> tuple[int, int, dict[str, Any]]:
    """``GET /api/{task}/pages?page=&page_size=``."""
    entry: dict[str, Any] = {"method": "GET", "route": "pages"}
    try:
        number = int(query.get("page", options.first_page))
        asked = int(query.get("page_size", DEFAULT_PAGE_SIZE))
    except ValueError as exc:
        raise PagingError("page and page_size must be integers", {**entry, "query": query}) from exc
    return page_offsets(options, number, asked, entry)


def read_search(options: PagingOptions, _query: dict[str, str], body: bytes) -> tuple[int, int, dict[str, Any]]:
    """``POST /api/{task}/search`` with ``{"offset", "limit"}`` or ``{"page", "page_size"}``."""
    entry: dict[str, Any] = {"method": "POST", "route": "search", "body": None}
    try:
        search = msgspec.json.decode(body or b"{}", type=SearchBody)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise PagingError(f"invalid body: {exc}", entry) from exc
    entry["body"] = msgspec.to_builtins(search)
    if search.page is not None:
        return page_offsets(options, search.page, search.page_size or DEFAULT_PAGE_SIZE, entry)
    if search.offset is None or search.limit is None:
        raise PagingError("give offset and limit, or page (and page_size)", entry)
    return search.offset, search.limit, entry


def page_offsets(options: PagingOptions, number: int, asked: int, entry: dict[str, Any]) -> tuple[int, int, dict]:
    """The offsets of page ``number`` of ``asked`` records (or of the task's fixed page size)."""
    size = options.page_size or asked
    entry = {**entry, "page": number, "page_size": size}
    if number < options.first_page:
        raise PagingError(f"page must be >= {options.first_page}", entry)
    return (number - options.first_page) * size, size, entry


#: The paging routes: path pattern -> method -> reader.
ROUTES: dict[tuple[str, ...], dict[str, Reader]] = {
    ("api", "*", "pages"): {"GET": read_pages},
    ("api", "*", "search"): {"POST": read_search},
}


def shaped_body(body: str, records: bytes, total: int) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
    """A page's body holding ``records`` (their JSON array) the way ``body`` says (see the module doc), and the
    content type it needs (none: JSON)."""
    if body == "list":
        return records, ()
    if body == "jsonl":
        lines = b"".join(bytes(record) + b"\n" for record in msgspec.json.decode(records, type=list[msgspec.Raw]))
        return lines, ((b"content-type", b"application/x-ndjson"),)
    return b'{"code":0,"msg":"ok","data":{"total":%d,"data":' % total + records + b"}}", ()
