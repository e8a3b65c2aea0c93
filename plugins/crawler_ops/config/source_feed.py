"""The config rules of the sequential paginators (``cursor``, ``next_link``, ``link_header``): a newest-first feed
read page after page, each page naming the next (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Sequence

#: The paginators that walk a feed page after page.
SEQUENTIAL = frozenset({"cursor", "next_link", "link_header"})
#: Placeholders that number offsets or pages: a feed has neither.
_NUMBERED = ("offset", "page", "page_size")


def feed_query(kind: str, cursor_param: str, limit_param: str) -> dict[str, str]:
    """The query of a feed's first page request when ``request.query`` is not given and there is no body."""
    if kind == "cursor":
        return {cursor_param: "{cursor}", limit_param: "{limit}"}
    return {limit_param: "{limit}"}


def check_feed_placeholders(kind: str, where: str, names: Sequence[str]) -> None:
    """``{cursor}`` only with a cursor paginator; no offsets or page numbers with a feed: ValueError naming
    ``where`` otherwise."""
    if "cursor" in names and kind != "cursor":
        raise ValueError(f"{where}: {{cursor}} needs paginator type cursor (the paginator is {kind})")
    if kind in SEQUENTIAL:
        wrong = [name for name in _NUMBERED if name in names]
        if wrong:
            raise ValueError(
                f"{where}: {{{wrong[0]}}} cannot be sent by a {kind} paginator, which reads a feed page after page "
                "without offsets or page numbers; send {limit} for the page size"
            )


def check_feed_task(kind: str, key_field: str | None) -> None:
    """A feed stops at the newest record the last crawl saw, found by its key: ValueError naming the field when the
    task has no key (the config's checks name the task)."""
    if kind not in SEQUENTIAL:
        return
    if key_field is None:
        raise ValueError(
            f"the key is not one field (kafka.key_field is null, or key_fields or key_template is set), but a {kind} "
            "paginator finds where the last crawl stopped by the key of the newest record it saw; name the records' "
            "unique key field in kafka.key_field"
        )
