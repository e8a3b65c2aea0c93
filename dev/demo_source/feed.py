"""A newest-first feed of a task's records, the way cursor and link paginated APIs serve them.

Per task, in the body of ``PUT /admin/tasks/{task}``: ``"feed": {"next": "cursor", "other_host": null,
"expire_cursors": false}``:

* ``next``: how a page names the next one: ``cursor`` (a token at ``data.next_cursor``, sent back as
  ``?cursor=``), ``header_cursor`` (the same token in the ``X-Next-Cursor`` header), ``next_link`` (a relative URL
  at ``data.next``), ``link_header`` (an absolute URL in ``Link: <...>; rel="next"``);
* ``other_host``: links point to this base URL instead (``http://elsewhere.invalid``), as a hostile or misconfigured
  source would;
* ``expire_cursors``: every request with a position answers 410, as a source whose cursors expired does;
* ``end``: how the last page says the feed ends: ``none`` (no next page), ``scroll`` (a next page again, which is
  empty and names itself, as scroll-style APIs do), ``self`` (the last page names itself as the next),
  ``has_more`` (every page names a next position, the last one too, and says ``data.has_more``: false on the last,
  as Stripe's and GraphQL's ``pageInfo`` do);
* ``body``: ``envelope`` (the records at ``data.data``), ``list`` (the bare JSON array, GitHub style) or ``jsonl``
  (JSON Lines); without an envelope the next page is named in a header only (``header_cursor``, ``link_header``).

Route: ``GET /api/{task}/feed?limit=&cursor=`` (cursor, header_cursor) or ``?limit=&before=`` (links). Page 1
holds the newest ``limit`` records (offsets ``total - 1`` down), each next page the ``limit`` records before the
last one served: a position is the offset of the last record served (``o<offset>``), so positions stay valid while
records are appended at the front. Each request is logged like ``/list`` with ``route: feed``, ``position`` (null:
the first page), ``offset`` (the oldest record served) and ``limit`` (records served).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from demo_source.data import Faults, TaskConfig, make_page
from demo_source.paging import shaped_body

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_ENCODER = msgspec.json.Encoder()


class FeedOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A task's feed options (see the module doc)."""

    next: Literal["cursor", "header_cursor", "next_link", "link_header"] = "cursor"
    other_host: str | None = None
    expire_cursors: bool = False
    end: Literal["none", "scroll", "self", "has_more"] = "none"
    body: Literal["envelope", "list", "jsonl"] = "envelope"


@dataclass(frozen=True)
class FeedAnswer:
    """A feed request's answer and what the request log keeps of it."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    offset: int | None
    served: int | None
    entry: dict[str, Any]


def error(status: int, msg: str, entry: dict[str, Any]) -> FeedAnswer:
    return FeedAnswer(status, _ENCODER.encode({"code": status, "msg": msg}), (), None, None, entry)


def serve_feed(
    config: TaskConfig, total: int, options: FeedOptions, query: dict[str, str], host: str, faults: Faults | None = None
) -> FeedAnswer:
    """The page a feed request asks for (``host``: the request's Host header, for absolute links; ``faults``: the
    task's record faults, ``set_fields`` and the like, applied as on every route)."""
    position = query.get("cursor" if options.next in ("cursor", "header_cursor") else "before")
    entry: dict[str, Any] = {"method": "GET", "route": "feed", "position": position}
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
        end = total if position is None else int(position.removeprefix("o"))
    except ValueError:
        return error(400, "limit must be an integer and a position o<offset>", entry)
    if not 1 <= limit <= MAX_LIMIT or not 0 <= end <= total:
        return error(400, f"limit must be within [1, {MAX_LIMIT}] and a position within the feed", entry)
    if position is not None and options.expire_cursors:
        return error(410, f"position {position} expired", entry)
    start = max(0, end - limit)
    records = list(reversed(make_page(config, start, end, faults)))
    following = f"o{start}" if start > 0 or options.end in ("scroll", "has_more") else None
    if following is None and options.end == "self" and position is not None:
        following = position
    data: dict[str, Any] = {"data": records}
    headers: tuple[tuple[bytes, bytes], ...] = ()
    base = options.other_host or f"http://{host}"
    link = None if following is None else f"/api/{config.task_id}/feed?limit={limit}&before={following}"
    if options.next == "cursor":
        data["next_cursor"] = following
    elif options.next == "header_cursor":
        headers = () if following is None else ((b"x-next-cursor", following.encode()),)
    elif options.next == "next_link":
        data["next"] = None if link is None else (base + link if options.other_host else link)
    elif link is not None:
        headers = ((b"link", f'<{base}{link}>; rel="next", <{base}/api/{config.task_id}/feed>; rel="first"'.encode()),)
    if options.end == "has_more":
        data["has_more"] = start > 0
    if options.body == "envelope":
        body = _ENCODER.encode({"code": 0, "msg": "ok", "data": data})
    else:
        body, typed = shaped_body(options.body, _ENCODER.encode(records), 0)
        headers = (*headers, *typed)
    return FeedAnswer(200, body, headers, start, end - start, entry)
