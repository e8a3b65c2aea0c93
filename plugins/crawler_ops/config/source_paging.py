"""``source.request``: the request of one page as templates, and the checks of the request's templates against the
paginator (:mod:`crawler_ops.config.paginators`) (pure: no I/O).

A template is a string over the placeholders of :data:`PLACEHOLDERS` (``{{`` and ``}}`` stand for braces); a
placeholder may carry a format spec (``{window_start:%Y-%m-%d}``, ``{page:03d}``). A value that is exactly one
placeholder without a spec keeps its type (a number in a JSON body or a query parameter); inside text it is text.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from crawler_ops.config.paginators import Paginator

#: The names a template may use: the data set's id, the batch's offsets, its page, the run's window and reference.
PLACEHOLDERS = ("task", "offset", "limit", "page", "page_size", "cursor", "window_start", "window_end", "ref")
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
#: The widest a format spec may pad or cut a value (``{page:03d}``): a width of a billion costs a gigabyte a request.
MAX_SPEC_WIDTH = 64
_WIDTH = re.compile(r"\d+")
_DATE_WIDTH = re.compile(r"%[-_0^#]*(\d+)")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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

    def templates(self, query: Mapping[str, str]) -> Iterator[tuple[str, str]]:
        """Every template of this page request with the field it sits in."""
        if self.path is not None:
            yield "request.path", self.path
        for name, value in query.items():
            yield f"request.query.{name}", value
        for name, value in self.headers.items():
            yield f"request.headers.{name}", value
        yield from json_templates(self.body, "request.body")


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
        # A date's spec is strftime's, where only a directive's flags carry a width (%010Y); digits elsewhere are text.
        widths = _DATE_WIDTH if isinstance(SAMPLE_VALUES[name], datetime) else _WIDTH
        if max((int(d) for d in widths.findall(spec or "")), default=0) > MAX_SPEC_WIDTH:
            raise ValueError(
                f"{template[:80]!r}: the format spec of {{{name}}} pads or cuts wider than {MAX_SPEC_WIDTH} characters"
            )
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


def check_request(paginator: Paginator, request: RequestConfig, query: Mapping[str, str]) -> None:
    """The page request must be sendable and say which records it wants: ValueError naming the field otherwise."""
    if request.method == "GET" and request.body is not None:
        raise ValueError("request.body: a GET request has no body; use method: POST, or query parameters")
    used: set[str] = set()
    for where, template in request.templates(query):
        try:
            names = template_names(template)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        paginator.check_placeholders(where, names)
        used.update(names)
    missing = [name for name in paginator.needed() if name not in used]
    if missing:
        hint = " (or paginator.size_param: null for a source with a fixed page size)" if "page_size" in missing else ""
        raise ValueError(
            f"request: no template sends {{{missing[0]}}}, so the source cannot tell which records a page wants; "
            f"put it in request.query or request.body{hint}"
        )
