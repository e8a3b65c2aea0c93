"""``source.paginator``: how the source numbers its pages, one class per kind (pure: no I/O).

Each kind is a config model named by its ``type``, whose members carry what differs between kinds: the query a page
request sends by default, the placeholders its templates may and must send, and either

- for a numbered source (``offset``, ``page``), the requests that read a batch of offsets, and its smaller parts when
  an answer is too heavy; or
- for a feed (``cursor``, ``header_cursor``, ``next_link``, ``link_header``), where an answer names the next page.

``crawl`` says which crawl reads a kind: ``offsets`` (batches of offsets in parallel, an exact watermark) or ``feed``
(page after page from the newest, down to the last crawl's mark); a run picks it once. A new kind is one class here
and one member of :data:`PaginatorConfig`.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from crawler_ops.config.kinds import kinds_of
from crawler_ops.config.source_responses import PATH_PATTERN
from crawler_ops.message.pages import body_path

#: The placeholders whose value differs from page to page, in the order a misplaced one is reported.
PAGING_PLACEHOLDERS = ("cursor", "offset", "page", "page_size", "limit")
#: An HTTP header name (an RFC 9110 token).
HEADER_NAME = r"^[!#$%&'*+.^_\x60|~0-9A-Za-z-]+$"
#: Answer headers are kept by their lower-case names.
Headers = Mapping[str, Sequence[str]]


class Slice(NamedTuple):
    """One request of a numbered source: it asks ``size`` records from ``start`` (``page``: its page number), and
    the batch's records are ``take`` of its answer after the first ``skip``; ``where`` names it in errors."""

    start: int
    size: int
    page: int | None
    skip: int
    take: int
    where: str


class Paginator(BaseModel):
    """What every kind of paginator answers; a kind is a subclass with its own ``type``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Which crawl reads this kind: ``offsets`` or ``feed``.
    crawl: ClassVar[Literal["offsets", "feed"]] = "offsets"
    #: Batches are cut at the multiples of batch_size (a page paginator's pages).
    aligned: ClassVar[bool] = False
    #: The paging placeholders its templates may send, and of those, the ones a page request must send.
    sends: ClassVar[frozenset[str]] = frozenset()
    needs: ClassVar[tuple[str, ...]] = ()

    #: A feed's position is a URL to GET (on the connection's own host), not a token sent through the templates.
    follows_links: ClassVar[bool] = False
    #: A relative link is resolved against the URL of the request that answered it (RFC 8288 for ``Link``), not the
    #: connection's base URL.
    links_relative_to_request: ClassVar[bool] = False

    type: str

    @property
    def answer_headers(self) -> tuple[str, ...]:
        """The headers of an answer a feed's next position is read from (lower case)."""
        return ()

    def next_position(self, body: bytes, headers: Headers) -> Any:
        """Where a feed's answer says the next page is, as it says it (missing: None)."""
        raise ValueError(f"a {self.type} paginator numbers its pages; no answer names the next")

    @abstractmethod
    def default_query(self, offset_param: str, limit_param: str) -> dict[str, str]:
        """The query of a page request when ``request.query`` is not given and there is no body."""

    def needed(self) -> tuple[str, ...]:
        """The placeholders a page request must send so the source can tell which records a page wants."""
        return self.needs

    def check_placeholders(self, where: str, names: Iterable[str]) -> None:
        """ValueError naming ``where`` when a template uses a paging placeholder this kind does not send."""
        used = set(names)
        for name in PAGING_PLACEHOLDERS:
            if name in used and name not in self.sends:
                raise ValueError(self.refusal(where, name))

    def refusal(self, where: str, name: str) -> str:
        owners = [kind for kind in KINDS if name in KINDS[kind].sends]
        also = f"; type {' / '.join(owners[1:])} sends it too" if len(owners) > 1 else ""
        return f"{where}: {{{name}}} needs paginator type {owners[0]} (the paginator is {self.type}){also}"

    def slices(self, lo: int, hi: int, batch_size: int) -> list[Slice]:
        """The requests that read offsets ``[lo, hi)``."""
        raise ValueError(f"a {self.type} paginator has no offsets to read [{lo}, {hi}) by")

    def whole(self) -> str | None:
        """Why a request cannot be read in smaller parts (None: it can, down to one record)."""
        return f"a {self.type} paginator has no offsets to split a request by"

    def parts(self, lo: int, hi: int, most: int) -> list[Slice]:
        """Smaller requests for the records ``[lo, hi)`` of a request of ``most`` (when :meth:`whole` is None)."""
        raise ValueError(f"a {self.type} paginator has no offsets to split a request by")

    def size_name(self, limit_param: str) -> str | None:
        """The parameter that says how many records a request asks (named when a page is longer than that)."""
        return limit_param

    def check_task(self, key_field: str | None, value_format: str) -> None:
        """ValueError when the task's key or value format does not fit this kind (the config's checks name the
        task)."""

    def check_lines(self) -> None:
        """ValueError when this kind reads something of a page's body besides its records, which a JSON Lines body
        (one record per line, no envelope) does not hold."""

    def feed_ends(self, body: bytes) -> bool:
        """Whether a feed's answer says it is the last page, whatever position it names (never, unless configured)."""
        return False

    @property
    def feed(self) -> str | None:
        """The kind's name when it walks a feed (for messages about what a feed cannot do); None otherwise."""
        return self.type if self.crawl == "feed" else None


# --------------------------------------------------------------------------- numbered sources


class OffsetPaginator(Paginator):
    """A batch ``[lo, hi)`` is asked as offset ``lo``, limit ``hi - lo``."""

    sends: ClassVar[frozenset[str]] = frozenset({"offset", "limit"})
    needs: ClassVar[tuple[str, ...]] = ("offset", "limit")

    type: Literal["offset"] = Field("offset", description="`offset`: records by offset and limit")

    def default_query(self, offset_param: str, limit_param: str) -> dict[str, str]:
        return {offset_param: "{offset}", limit_param: "{limit}"}

    def slices(self, lo: int, hi: int, batch_size: int) -> list[Slice]:
        """The requests that read offsets ``[lo, hi)``: one."""
        return [Slice(lo, hi - lo, None, 0, hi - lo, f"offsets [{lo}, {hi})")]

    def whole(self) -> str | None:
        return None

    def parts(self, lo: int, hi: int, most: int) -> list[Slice]:
        """Its two halves."""
        mid = lo + (hi - lo) // 2
        return [Slice(a, b - a, None, 0, b - a, f"offsets [{a}, {b})") for a, b in ((lo, mid), (mid, hi))]


class PagePaginator(Paginator):
    """A batch is asked as page number ``lo // batch_size + first_page``: batch_size is the page size, and batches
    are cut at page boundaries."""

    aligned: ClassVar[bool] = True
    sends: ClassVar[frozenset[str]] = frozenset({"page", "page_size"})

    type: Literal["page"] = Field(description="`page`: records by page number")
    page_param: str = Field("page", min_length=1, description="the parameter carrying the page number")
    first_page: int = Field(1, ge=0, le=1, description="the number of the source's first page")
    size_param: str | None = Field(
        "page_size",
        min_length=1,
        description="the parameter carrying the page size; null: the source's pages have a fixed size, which "
        "batch_size must equal (a page of more records fails the batch, naming batch_size)",
    )

    def needed(self) -> tuple[str, ...]:
        return ("page",) if self.size_param is None else ("page", "page_size")

    def default_query(self, offset_param: str, limit_param: str) -> dict[str, str]:
        query = {self.page_param: "{page}"}
        if self.size_param is not None:
            query[self.size_param] = "{page_size}"
        return query

    def slices(self, lo: int, hi: int, batch_size: int) -> list[Slice]:
        """The pages holding offsets ``[lo, hi)`` (one when the batch lies within a page, as planned batches do).
        A source that takes a page size reads ``[lo, hi)`` as one page of ``hi - lo`` records when that size
        divides ``lo`` (a one-record read, the newest partial page); otherwise pages are ``batch_size`` long."""
        wanted = hi - lo
        size = wanted if self.size_param is not None and 0 < wanted <= batch_size and lo % wanted == 0 else batch_size
        return self.pages(lo, hi, size, "page {page} (offsets [{a}, {b}) of [{start}, {end}))")

    def whole(self) -> str | None:
        if self.size_param is None:
            return "the source's pages have a fixed size (paginator.size_param is null): no smaller page can be asked"
        return None

    def parts(self, lo: int, hi: int, most: int) -> list[Slice]:
        """Pages of a size dividing ``most`` (half of it when even), so each part is a whole page at its own
        number."""
        size = most // smallest_factor(most)
        return self.pages(lo, hi, size, "page {page} of {size} records (offsets [{a}, {b}))")

    def pages(self, lo: int, hi: int, size: int, where: str) -> list[Slice]:
        """The pages of ``size`` records holding offsets ``[lo, hi)``, each taking its share of them; ``where``
        describes each (a format over ``page``, ``size``, ``a``, ``b``, ``start``, ``end``)."""
        found = []
        for index in range(lo // size, (hi - 1) // size + 1):
            start = index * size
            a, b = max(lo, start), min(hi, start + size)
            shown = where.format(page=index + self.first_page, size=size, a=a, b=b, start=start, end=start + size)
            found.append(Slice(start, size, index + self.first_page, a - start, b - a, shown))
        return found

    def size_name(self, limit_param: str) -> str | None:
        return self.size_param


def smallest_factor(n: int) -> int:
    """The smallest prime factor of ``n`` (at least 2)."""
    return next((f for f in range(2, int(n**0.5) + 1) if n % f == 0), n)


# --------------------------------------------------------------------------- feeds


class FeedPaginator(Paginator):
    """A newest-first feed read page after page from its first page, each page naming the next, down to the newest
    record the last crawl saw; it has no offsets or page numbers."""

    crawl: ClassVar[Literal["offsets", "feed"]] = "feed"
    sends: ClassVar[frozenset[str]] = frozenset({"limit"})
    needs: ClassVar[tuple[str, ...]] = ("limit",)
    #: Where the next position is named: the body, or a response header.
    named_in: ClassVar[Literal["body", "header"]] = "body"

    has_more_path: str | None = Field(
        None,
        pattern=PATH_PATTERN,
        description="dotted JSON path of a boolean in a page's body saying whether a next page exists (`has_more`, "
        "`pageInfo.hasNextPage`): false ends the feed whatever position the page names; a page without a boolean "
        "there fails for good. null: the feed ends where no next position is named (or at an empty page)",
    )

    def feed_ends(self, body: bytes) -> bool:
        if self.has_more_path is None:
            return False
        more = body_value(body, self.has_more_path)
        if not isinstance(more, bool):
            raise ValueError(
                f"the page's value at paginator.has_more_path '{self.has_more_path}' is {str(more)[:80]!r}, not true "
                "or false: the source changed shape or has_more_path is wrong"
            )
        return not more

    def check_lines(self) -> None:
        if self.named_in == "body":
            raise ValueError(
                f"paginator: a {self.type} feed reads the next page from the body, but a JSON Lines body "
                "(records_format jsonl) holds records only; use header_cursor or link_header"
            )
        if self.has_more_path is not None:
            raise ValueError(
                f"paginator.has_more_path '{self.has_more_path}': a JSON Lines body (records_format jsonl) holds "
                "records only, no has_more flag; remove has_more_path"
            )

    def default_query(self, offset_param: str, limit_param: str) -> dict[str, str]:
        return {limit_param: "{limit}"}

    def refusal(self, where: str, name: str) -> str:
        if name in ("offset", "page", "page_size"):
            return (
                f"{where}: {{{name}}} cannot be sent by a {self.type} paginator, which reads a feed page after page "
                "without offsets or page numbers; send {limit} for the page size"
            )
        return super().refusal(where, name)

    def check_task(self, key_field: str | None, value_format: str) -> None:
        """A feed stops at the newest record the last crawl saw, found by its key: ValueError naming the field
        otherwise (the config's checks name the task)."""
        if key_field is None:
            raise ValueError(
                f"the key is not one field (kafka.key_field is null, or key_fields or key_template is set), but a "
                f"{self.type} paginator finds where the last crawl stopped by the key of the newest record it saw; "
                "name the records' unique key field in kafka.key_field"
            )


def body_value(body: bytes, path: str) -> Any:
    """The value at a dotted JSON path of a body (None when the body has no such path), the page's records unbuilt."""
    return body_path(body, path)


class TokenPaginator(FeedPaginator):
    """A feed whose answers name the next page by a token, sent back in the next request as ``{cursor}``."""

    sends: ClassVar[frozenset[str]] = frozenset({"cursor", "limit"})
    needs: ClassVar[tuple[str, ...]] = ("cursor", "limit")

    cursor_param: str = Field(
        "cursor",
        min_length=1,
        description="the query parameter carrying the token when request.query is not given (left out of the first "
        "page's request)",
    )

    def default_query(self, offset_param: str, limit_param: str) -> dict[str, str]:
        return {self.cursor_param: "{cursor}", limit_param: "{limit}"}


class CursorPaginator(TokenPaginator):
    """Each page's body names the next page by a token."""

    type: Literal["cursor"] = Field(description="`cursor`: a token in the body names the next page")
    cursor_path: str = Field(
        "next_cursor", min_length=1, description="dotted JSON path of the next page's token in a page's body"
    )

    def next_position(self, body: bytes, headers: Headers) -> Any:
        return body_value(body, self.cursor_path)


class HeaderCursorPaginator(TokenPaginator):
    """Each answer names the next page by a token in a response header (a missing or empty header: the end)."""

    named_in: ClassVar[Literal["body", "header"]] = "header"

    type: Literal["header_cursor"] = Field(
        description="`header_cursor`: a token in a response header names the next page"
    )
    cursor_header: str = Field(
        "X-Next-Cursor",
        min_length=1,
        max_length=100,
        pattern=HEADER_NAME,
        description="the response header carrying the next page's token",
    )

    @property
    def answer_headers(self) -> tuple[str, ...]:
        return (self.cursor_header.lower(),)

    def next_position(self, body: bytes, headers: Headers) -> Any:
        return next(iter(headers.get(self.cursor_header.lower()) or ()), None)


class NextLinkPaginator(FeedPaginator):
    """Each page's body names the next page by its URL."""

    follows_links: ClassVar[bool] = True

    type: Literal["next_link"] = Field(description="`next_link`: a URL in the body names the next page")
    next_path: str = Field("next", min_length=1, description="dotted JSON path of the next page's URL in a page's body")

    def next_position(self, body: bytes, headers: Headers) -> Any:
        return body_value(body, self.next_path)


class LinkHeaderPaginator(FeedPaginator):
    """Each answer names the next page by an RFC 8288 ``Link`` header with ``rel="next"``."""

    follows_links: ClassVar[bool] = True
    links_relative_to_request: ClassVar[bool] = True
    named_in: ClassVar[Literal["body", "header"]] = "header"

    type: Literal["link_header"] = Field(description="`link_header`: a Link header (rel=next) names the next page")

    @property
    def answer_headers(self) -> tuple[str, ...]:
        return ("link",)

    def next_position(self, body: bytes, headers: Headers) -> Any:
        return parse_links(headers.get("link") or ()).get("next")


def parse_links(values: Iterable[str]) -> dict[str, str]:
    """The targets of ``Link`` header values by relation type (RFC 8288): ``<url>; rel="next"`` -> ``{"next":
    url}``. A link with several relation types (``rel="next last"``) counts for each; the first link of a type
    wins; relation types are case-insensitive; what does not parse ends the value's parsing. Read in one pass, in
    time linear in the header (a source sends it, so no pattern may backtrack over it)."""
    found: dict[str, str] = {}
    for value in values:
        for target, params in link_values(value):
            for name, raw in params:
                if name.lower() == "rel":
                    for rel in unquote(raw).lower().split():
                        found.setdefault(rel, target.strip())
    return found


def link_values(value: str) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Each link-value of one header value: its target and its parameters (name, raw value), up to the first one that
    does not parse (``<target>``, then ``; name`` or ``; name=value`` with a token or a quoted value, then a comma or
    the end)."""
    i, end = 0, len(value)
    while (i := skip_space(value, i)) < end and value[i] == "<":
        close = value.find(">", i + 1)
        if close < 0:
            return
        target, params, i = value[i + 1 : close], [], close + 1
        while (i := skip_space(value, i)) < end and value[i] == ";":
            i = skip_space(value, i + 1)
            name, i = take(value, i, ';,="')
            if not name:
                return
            if (j := skip_space(value, i)) < end and value[j] == "=":
                raw, i = param_value(value, skip_space(value, j + 1))
                if raw is None:
                    return
            else:
                raw = ""
            params.append((name, raw))
        if i < end and value[i] != ",":
            return
        yield target, params
        i += 1


def skip_space(value: str, i: int) -> int:
    while i < len(value) and value[i].isspace():
        i += 1
    return i


def take(value: str, i: int, stops: str) -> tuple[str, int]:
    """The characters from ``i`` up to whitespace or one of ``stops``, and where they end."""
    j = i
    while j < len(value) and value[j] not in stops and not value[j].isspace():
        j += 1
    return value[i:j], j


def param_value(value: str, i: int) -> tuple[str | None, int]:
    """A parameter's raw value at ``i``: a quoted string with its quotes (None when it is not closed), else a token
    (maybe empty); and where it ends."""
    if i >= len(value) or value[i] != '"':
        return take(value, i, ';,"')
    j = i + 1
    while j < len(value) and value[j] != '"':
        j += 2 if value[j] == "\\" else 1
    if j >= len(value):
        return None, j
    return value[i : j + 1], j + 1


def unquote(raw: str) -> str:
    """A parameter's value without its quotes and backslash escapes."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


PaginatorConfig = Annotated[
    OffsetPaginator | PagePaginator | CursorPaginator | HeaderCursorPaginator | NextLinkPaginator | LinkHeaderPaginator,
    Field(discriminator="type"),
]
#: Each kind by its ``type``.
KINDS: dict[str, type[Paginator]] = kinds_of(PaginatorConfig)  # type: ignore[assignment]
