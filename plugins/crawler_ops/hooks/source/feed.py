"""A sequential feed's pages: the request of a page from its position (a cursor token, or the URL of a link), and
where a page's answer says the next page is (a token in the body, a URL in the body, an RFC 8288 Link header).

Pure: :func:`feed_send` describes a request and :func:`read_feed` decodes an answer; the source hook sends them
through its deadline, retries and rate limit. A link is followed only to the connection's own host, so the
connection's credentials never go to another.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import msgspec

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.paging import Paging, Send, render, render_json
from crawler_ops.hooks.source.responses import decode_page
from crawler_ops.message.pages import Page, json_path

# One link-value of a Link header: <uri-reference> then its parameters up to the next top-level comma.
_LINK = re.compile(r'\s*<([^>]*)>((?:\s*;\s*[^;,="\s]+\s*(?:=\s*(?:"(?:[^"\\]|\\.)*"|[^;,"\s]*))?)*)\s*(?:,|$)')
_PARAM = re.compile(r'\s*;\s*([^;,="\s]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^;,"\s]*))?')


class LinkedBody(bytes):
    """A page's body with the values of its answer's ``Link`` headers."""

    links: tuple[str, ...] = ()

    @classmethod
    def of(cls, body: bytes, links: Iterable[str]) -> LinkedBody:
        linked = cls(body)
        linked.links = tuple(links)
        return linked


@dataclass(frozen=True)
class FeedPage:
    """A page's records (newest first) and the position of the next page (None: the feed ends here)."""

    records: Page
    next: str | None


def parse_links(values: Iterable[str]) -> dict[str, str]:
    """The targets of ``Link`` header values by relation type (RFC 8288): ``<url>; rel="next"`` -> ``{"next":
    url}``. A link with several relation types (``rel="next last"``) counts for each; the first link of a type
    wins; relation types are case-insensitive; what does not parse ends the value's parsing."""
    found: dict[str, str] = {}
    for value in values:
        position = 0
        while position < len(value) and (match := _LINK.match(value, position)) is not None and match.end() > position:
            position = match.end()
            for name, raw in _PARAM.findall(match.group(2)):
                if name.lower() == "rel":
                    for rel in unquote(raw).lower().split():
                        found.setdefault(rel, match.group(1).strip())
    return found


def unquote(raw: str) -> str:
    """A parameter's value without its quotes and backslash escapes."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def on_host(link: str, base: str, label: str) -> str:
    """``link`` as an absolute URL (a relative one against the connection's ``base`` URL); a link to another
    scheme, host or port fails for good, naming it."""
    url = urljoin(base.rstrip("/") + "/", link)
    got, own = urlsplit(url), urlsplit(base)
    if (got.scheme.lower(), got.netloc.lower()) != (own.scheme.lower(), own.netloc.lower()):
        raise SourceError(
            f"{label}: the next page's link {url!r} leads to host {got.netloc or '(none)'!r}, not the source "
            f"connection's {own.netloc!r}; refused, so the connection's credentials never go to another host",
            retriable=False,
        )
    return url


def token(value: Any) -> str | None:
    """A next-page token or URL as text; missing, null or empty: None (the feed ends)."""
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    return text or None


def feed_send(paging: Paging, position: str | None, base: str, label: str) -> Send:
    """The request of the page at ``position``: the first page (None) from the request templates, without a
    cursor (a query parameter that is exactly ``{cursor}`` is left out, a body field is null); the next pages of a
    cursor paginator from the templates with the token; those of a link paginator by GET of the link."""
    source = paging.source
    values = {**paging.values, "limit": paging.batch_size, "cursor": position}
    headers = {name: str(render(template, values)) for name, template in source.request.headers.items()}
    if position is not None and source.paginator.type != "cursor":
        return Send(on_host(position, base, label), {}, "GET", headers, links=True)
    params = {
        name: render(template, values)
        for name, template in source.page_query.items()
        if not (position is None and template == "{cursor}")
    }
    path = str(render(source.request_path, values))
    body = render_json(source.request.body, values)
    return Send(path, params, source.request.method, headers, body, links=source.paginator.type == "link_header")


def read_feed(body: bytes, source: SourceConfig, fields: tuple[str, ...], base: str, label: str) -> FeedPage:
    """A page's records and the position of the next page, from its body (and Link header)."""
    records = decode_page(body, source.records_path, fields)
    kind = source.paginator.type
    if kind == "link_header":
        link = parse_links(getattr(body, "links", ())).get("next")
        return FeedPage(records, None if token(link) is None else on_host(str(link), base, label))
    try:
        found = token(json_path(msgspec.json.decode(body), source.paginator.next_field))
    except KeyError:
        found = None
    if kind == "next_link" and found is not None:
        found = on_host(found, base, label)
    return FeedPage(records, found)


def feed_reader(source: SourceConfig, fields: tuple[str, ...], base: str, label: str) -> Callable[[bytes], FeedPage]:
    return functools.partial(read_feed, source=source, fields=fields, base=base, label=label)
