"""A sequential feed's pages: the request of a page from its position (a cursor token, or the URL of a link), and
where a page's answer says the next page is (a token in the body, a URL in the body, an RFC 8288 Link header).

Pure: :func:`feed_send` describes a request and :func:`read_feed` decodes an answer; the source hook sends them
through its deadline, retries and rate limit. A link is followed only to the connection's own host, so the
connection's credentials never go to another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.paging import Paging, Send, render, render_json
from crawler_ops.hooks.source.responses import decode_page
from crawler_ops.message.pages import Page

#: The longest position (a cursor token or a next link) a feed follows and stores: longer ones fail for good.
MAX_POSITION_CHARS = 8192


class HeadedBody(bytes):
    """A page's body with the values of the answer's headers its paginator reads (lower-case names)."""

    headers: Mapping[str, tuple[str, ...]] = {}

    @classmethod
    def of(cls, body: bytes, headers: Mapping[str, Iterable[str]]) -> HeadedBody:
        headed = cls(body)
        headed.headers = {name: tuple(values) for name, values in headers.items()}
        return headed


@dataclass(frozen=True)
class FeedPage:
    """A page's records (newest first) and the position of the next page (None: the feed ends here)."""

    records: Page
    next: str | None


def on_host(link: str, base: str, label: str, against: str | None = None) -> str:
    """``link`` as an absolute URL (a relative one against ``against``, the URL of the request whose answer named it,
    else the connection's ``base`` URL); a link to another scheme, host or port than ``base``'s fails for good,
    naming it."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in link):
        raise SourceError(
            f"{label}: the next page's link holds a space or a control character ({link[:200]!r}); not followed",
            retriable=False,
        )
    try:
        url = urljoin(against or base.rstrip("/") + "/", link)
        got, own = urlsplit(url), urlsplit(base)
        got.port  # noqa: B018 - a port out of range or not a number raises here, not when the link is sent
    except ValueError as exc:
        raise SourceError(f"{label}: the next page's link {link[:200]!r} is no URL ({exc})", retriable=False) from exc
    if (got.scheme.lower(), got.netloc.lower()) != (own.scheme.lower(), own.netloc.lower()):
        raise SourceError(
            f"{label}: the next page's link {url!r} leads to host {got.netloc or '(none)'!r}, not the source "
            f"connection's {own.netloc!r}; refused, so the connection's credentials never go to another host",
            retriable=False,
        )
    return url


def token(value: Any, label: str = "feed") -> str | None:
    """A next-page token or URL as text; missing, null or empty: None (the feed ends). One longer than
    :data:`MAX_POSITION_CHARS` (or a number too long to write) fails for good: it would be stored and sent back."""
    if value is None or isinstance(value, (dict, list)):
        return None
    try:
        text = str(value).strip()
    except ValueError as exc:  # an integer of more digits than Python writes
        raise SourceError(
            f"{label}: the next page's position is a number too long to use ({exc})", retriable=False
        ) from exc
    if len(text) > MAX_POSITION_CHARS:
        raise SourceError(
            f"{label}: the next page's position is {len(text):,} characters long, more than {MAX_POSITION_CHARS:,}; "
            f"not followed nor stored (it starts {text[:80]!r})",
            retriable=False,
        )
    return text or None


def feed_send(paging: Paging, position: str | None, base: str, label: str) -> Send:
    """The request of the page at ``position``: the first page (None) from the request templates, without a
    cursor (a query parameter that is exactly ``{cursor}`` is left out, a body field is null); the next pages of a
    token paginator from the templates with the token; those of a link paginator by GET of the link."""
    source, paginator = paging.source, paging.source.paginator
    values = {**paging.values, "limit": paging.batch_size, "cursor": position}
    headers = {name: str(render(template, values)) for name, template in source.request.headers.items()}
    kept = paginator.answer_headers
    if position is not None and paginator.follows_links:
        return Send(on_host(position, base, label), {}, "GET", headers, answer_headers=kept)
    params = {
        name: render(template, values)
        for name, template in source.page_query.items()
        if not (position is None and template == "{cursor}")
    }
    path = str(render(source.request_path, values))
    body = render_json(source.request.body, values)
    return Send(path, params, source.request.method, headers, body, answer_headers=kept)


def request_url(client: httpx.Client, send: Send) -> str:
    """The URL ``send`` goes to through ``client`` (its base URL merged, the query included), as a relative
    ``Link`` in its answer is resolved against it."""
    return str(client.build_request(send.method, send.path, params=send.params or None).url)


def read_feed(
    body: bytes, source: SourceConfig, fields: tuple[str, ...], base: str, label: str, url: str | None = None
) -> FeedPage:
    """A page's records and the position of the next page, where its paginator reads it (body or headers), none when
    the page says it is the last (``paginator.has_more_path``); a link is followed only on the connection's own host.
    ``url``: the page request's URL, which a relative ``Link`` header is resolved against (RFC 8288); a relative link
    in the body is resolved against the base URL."""
    records = decode_page(body, source.records_path, fields)
    paginator = source.paginator
    try:
        last = paginator.feed_ends(body)
    except ValueError as exc:
        raise SourceError(f"{label}: {exc}", retriable=False) from exc
    if last:
        return FeedPage(records, None)
    found = token(paginator.next_position(body, getattr(body, "headers", {})), label)
    if found is not None and paginator.follows_links:
        found = on_host(found, base, label, url if paginator.links_relative_to_request else None)
    return FeedPage(records, found)


def feed_reader(
    source: SourceConfig, fields: tuple[str, ...], base: str, label: str, url: str | None = None
) -> Callable[[bytes], FeedPage]:
    return functools.partial(read_feed, source=source, fields=fields, base=base, label=label, url=url)
