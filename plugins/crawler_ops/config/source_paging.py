"""``source.paginator`` and ``source.request``: how a batch of offsets becomes one HTTP request, and the checks of
the request's templates (pure: no I/O).

A template is a string over the placeholders of :data:`PLACEHOLDERS` (``{{`` and ``}}`` stand for braces); a
placeholder may carry a format spec (``{window_start:%Y-%m-%d}``, ``{page:03d}``). A value that is exactly one
placeholder without a spec keeps its type (a number in a JSON body or a query parameter); inside text it is text.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from crawler_ops.config.source_feed import SEQUENTIAL, check_feed_placeholders, feed_query

#: The names a template may use: the data set's id, the batch's offsets, its page, the run's window and reference.
PLACEHOLDERS = ("task", "offset", "limit", "page", "page_size", "cursor", "window_start", "window_end", "ref")
#: Only a page paginator numbers pages.
PAGE_PLACEHOLDERS = frozenset({"page", "page_size"})
# Values a template is formatted with when checked, so a format spec that cannot apply fails validation.
_SAMPLE_TIME = datetime(2026, 1, 1, tzinfo=UTC)
SAMPLE_VALUES: Mapping[str, Any] = {
    "task": "task",
    "offset": 0,
    "limit": 1,
    "page": 1,
    "page_size": 1,
    "cursor": "c",
    "window_start": _SAMPLE_TIME,
    "window_end": _SAMPLE_TIME,
    "ref": _SAMPLE_TIME,
}
_FORMATTER = string.Formatter()


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PaginatorConfig(_Section):
    """How the source numbers its pages. offset and page read pages in parallel and keep the exact watermark;
    cursor, next_link and link_header walk a newest-first feed page after page (see docs/sources.md)."""

    type: Literal["offset", "page", "cursor", "next_link", "link_header"] = Field(
        "offset",
        description="offset: a batch [lo, hi) is asked as offset lo, limit hi - lo; page: as page number "
        "lo // batch_size + first_page (batch_size is the page size; batches are cut at page boundaries); cursor, "
        "next_link, link_header: a newest-first feed read page after page from its first page, each page naming "
        "the next by a token in the body (cursor_path), a URL in the body (next_path) or an RFC 8288 Link header "
        "(rel=next), down to the newest record the last crawl saw",
    )
    page_param: str = Field("page", min_length=1, description="page: the parameter carrying the page number")
    first_page: int = Field(1, ge=0, le=1, description="page: the number of the source's first page")
    size_param: str | None = Field(
        "page_size",
        min_length=1,
        description="page: the parameter carrying the page size; null: the source's pages have a fixed size, "
        "which batch_size must equal (a page of more records fails the batch, naming batch_size)",
    )
    cursor_path: str = Field(
        "next_cursor", min_length=1, description="cursor: dotted JSON path of the next page's token in a page's body"
    )
    cursor_param: str = Field(
        "cursor",
        min_length=1,
        description="cursor: the query parameter carrying the token when request.query is not given (left out of "
        "the first page's request)",
    )
    next_path: str = Field(
        "next", min_length=1, description="next_link: dotted JSON path of the next page's URL in a page's body"
    )

    @property
    def pages(self) -> bool:
        return self.type == "page"

    @property
    def next_field(self) -> str:
        """Where a page's body names the next page: the cursor's path, or the next link's."""
        return self.cursor_path if self.type == "cursor" else self.next_path

    @property
    def sequential(self) -> bool:
        """A feed read page after page, each page naming the next."""
        return self.type in SEQUENTIAL


class RequestConfig(_Section):
    """The request of one page, as templates: a value that is exactly one placeholder keeps its type (a number in a
    JSON body), a format spec formats it (``{window_start:%Y-%m-%d}``), ``{{`` and ``}}`` are braces. Template
    headers go with page requests only; the connection's extra sends static headers with every request."""

    method: Literal["GET", "POST"] = Field("GET", description="HTTP method of a page request")
    path: str | None = Field(None, description="path of a page request (a template); default source.page_path")
    query: dict[str, str] | None = Field(
        None,
        description="query parameters (templates); default: the paginator's (offset_param and limit_param, or "
        "page_param and size_param) when there is no body, none when there is one",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers of a page request (templates)")
    body: JsonValue = Field(
        None, description="POST only: the JSON body, any of whose strings may be templates; null: no body"
    )


def default_query(paginator: PaginatorConfig, offset_param: str, limit_param: str) -> dict[str, str]:
    """The query of a page request when ``request.query`` is not given and there is no body."""
    if paginator.sequential:
        return feed_query(paginator.type, paginator.cursor_param, limit_param)
    if not paginator.pages:
        return {offset_param: "{offset}", limit_param: "{limit}"}
    query = {paginator.page_param: "{page}"}
    if paginator.size_param is not None:
        query[paginator.size_param] = "{page_size}"
    return query


def template_names(template: str) -> list[str]:
    """The placeholders of ``template``; ValueError for broken braces, an unknown name, a conversion or a format
    spec that does not apply to the placeholder's value."""
    names = []
    try:
        parts = list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise ValueError(f"{template!r} is no template ({exc}); write {{{{ and }}}} for literal braces") from exc
    for _text, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
            raise ValueError(f"{template!r} uses the unknown placeholder {{{name}}}; known: {known}")
        if conversion is not None:
            raise ValueError(f"{template!r}: {{{name}!{conversion}}} converts; use a format spec after ':' instead")
        try:
            format(SAMPLE_VALUES[name], spec or "")
        except ValueError as exc:
            raise ValueError(f"{template!r}: the format spec {spec!r} does not apply to {{{name}}}: {exc}") from exc
        names.append(name)
    return names


def json_templates(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Each string of a JSON value with where it sits (``body.filter.from``); keys are not templates."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from json_templates(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from json_templates(item, f"{where}[{index}]")


def request_templates(request: RequestConfig, query: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """Every template of a page request with the field it sits in."""
    if request.path is not None:
        yield "request.path", request.path
    for name, value in query.items():
        yield f"request.query.{name}", value
    for name, value in request.headers.items():
        yield f"request.headers.{name}", value
    yield from json_templates(request.body, "request.body")


def check_request(paginator: PaginatorConfig, request: RequestConfig, query: Mapping[str, str]) -> None:
    """The page request must be sendable and say which records it wants: ValueError naming the field otherwise."""
    if request.method == "GET" and request.body is not None:
        raise ValueError("request.body: a GET request has no body; use method: POST, or query parameters")
    used: set[str] = set()
    for where, template in request_templates(request, query):
        try:
            names = template_names(template)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        check_feed_placeholders(paginator.type, where, names)
        wrong = sorted(PAGE_PLACEHOLDERS.intersection(names)) if not paginator.pages else []
        if wrong:
            raise ValueError(f"{where}: {{{wrong[0]}}} needs paginator type page (the paginator is {paginator.type})")
        used.update(names)
    needed = ["page"] if paginator.pages else ["offset", "limit"]
    if paginator.sequential:
        needed = ["cursor", "limit"] if paginator.type == "cursor" else ["limit"]
    if paginator.pages and paginator.size_param is not None:
        needed.append("page_size")
    missing = [name for name in needed if name not in used]
    if missing:
        hint = " (or paginator.size_param: null for a source with a fixed page size)" if "page_size" in missing else ""
        raise ValueError(
            f"request: no template sends {{{missing[0]}}}, so the source cannot tell which records a page wants; "
            f"put it in request.query or request.body{hint}"
        )
