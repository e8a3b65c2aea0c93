"""``source.window_filter``: the request parameters that make the source answer only the records dated in a window
``[window_start, window_end)``, and where it counts them (pure: no I/O).

A filtered view holds the records of the window in the source's own order, numbered from 0: backfills read it by
offset within itself (``[0, count)``, parallel pages, the same paginator), and a first crawl takes its count to
place the window's start among the unfiltered offsets (docs/sources.md, "Window filter").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from crawler_ops.config.source_paging import json_templates, template_names

#: The placeholders a window filter may use: the same for the count and every page of a run.
WINDOW_PLACEHOLDERS = frozenset({"task", "window_start", "window_end", "ref"})
WINDOW_BOUNDS = ("window_start", "window_end")


class WindowFilterConfig(BaseModel):
    """Parameters that restrict the source's pages and count to the records dated in ``[window_start,
    window_end)``; both bounds must be sent, formatted as the source wants them (``{window_start:%Y-%m-%d
    %H:%M:%S}`` is the wall time in ``filter.timezone``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: dict[str, str] = Field(
        default_factory=dict,
        description="query parameters (templates over {window_start} {window_end} {ref} {task}) added to every page "
        "request of a filtered read, and to its count request unless count_query is given",
    )
    body: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="POST requests only: fields (templates) added to the top level of the page request's JSON body",
    )
    count_path: str | None = Field(
        None,
        description="path of the filtered count request; default source.count_path (with source.count_path null as "
        "well, the filtered view's count is probed from its pages)",
    )
    count_query: dict[str, str] | None = Field(
        None, description="query parameters (templates) of the filtered count request; default: query"
    )
    total_path: str | None = Field(
        None, description="dotted JSON path of the count in the filtered count's answer; default source.total_path"
    )

    def count_templates(self) -> dict[str, str]:
        """The query templates of the filtered count request."""
        return dict(self.query if self.count_query is None else self.count_query)

    def templates(self) -> Iterator[tuple[str, str]]:
        """Each template of this window filter with the field it sits in."""
        for name, value in self.query.items():
            yield f"window_filter.query.{name}", value
        for name, value in (self.count_query or {}).items():
            yield f"window_filter.count_query.{name}", value
        if self.count_path is not None:
            yield "window_filter.count_path", self.count_path
        yield from json_templates(self.body, "window_filter.body")

    def check(self, method: str, counted: bool) -> None:
        """This window filter must send both bounds on every page request, and on the count request when the source is
        counted (``counted``: a count path is known), and use no batch placeholder: ValueError naming the field."""
        for where, template in self.templates():
            try:
                names = template_names(template)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            wrong = sorted(set(names) - WINDOW_PLACEHOLDERS)
            if wrong:
                raise ValueError(
                    f"{where}: {{{wrong[0]}}} differs between pages; a window filter uses only "
                    + ", ".join(f"{{{p}}}" for p in sorted(WINDOW_PLACEHOLDERS))
                )
        if self.body and method != "POST":
            raise ValueError("window_filter.body: page requests are GET, which have no body; use window_filter.query")
        page_names = names_in(self.query, "query") | names_in(self.body, "body")
        missing = [bound for bound in WINDOW_BOUNDS if bound not in page_names]
        if missing:
            raise ValueError(
                f"window_filter: no query or body template sends {{{missing[0]}}}, so the source's pages would not be "
                "restricted to the window; send both {window_start} and {window_end}"
            )
        if counted:
            count_names = names_in(self.count_templates(), "count_query")
            missing = [bound for bound in WINDOW_BOUNDS if bound not in count_names]
            if missing:
                raise ValueError(
                    f"window_filter: the count request sends no {{{missing[0]}}} (window_filter.count_query, default "
                    "window_filter.query), so it would count more than the window; send both bounds"
                )


def names_in(templates: Mapping[str, Any] | Any, where: str) -> set[str]:
    """The placeholders used by the templates of a query mapping or a JSON value."""
    return {name for _where, template in json_templates(templates, where) for name in template_names(template)}
