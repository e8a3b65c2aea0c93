"""How a batch of offsets becomes page requests, and how a total is found without a count endpoint.

Pure: :class:`Paging` describes requests (:class:`PageCall`) and :func:`probe_total` searches with a reader it is
given; :class:`crawler_ops.hooks.source.hook.SourceApiHook` sends them through its deadline, retries and rate limit.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from crawler_ops.config import CrawlTaskConfig, SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.responses import PageTooLongError, Split, decode_page
from crawler_ops.message.pages import Page

#: The batch size of a crawl task that does not say (the page size of a page paginator).
DEFAULT_BATCH_SIZE = 100
_FORMATTER = string.Formatter()


@dataclass(frozen=True)
class Send:
    """One request: its path, query parameters, method, headers and JSON body (None: none); ``answer_headers``: the
    headers of its answer kept with the body (:class:`crawler_ops.hooks.source.feed.HeadedBody`), lower case."""

    path: str
    params: Mapping[str, Any] = field(default_factory=dict)
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    answer_headers: tuple[str, ...] = ()

    def httpx(self) -> dict[str, Any]:
        """The arguments of ``httpx.Client.stream`` that send it."""
        return {
            "method": self.method,
            "url": self.path,
            "params": dict(self.params) or None,  # none: the query of a URL given whole (a next link) stays
            "headers": self.headers,
            "json": self.body,
        }


@dataclass(frozen=True)
class PageCall:
    """One page request and which of its records a batch takes.

    :param send: the request.
    :param skip: records of the answer before the first the batch wants; ``take``: how many it wants.
    :param most: records the answer may hold at most (it fails past them, decoding no further).
    :param size_param: the parameter the source must honour for ``most`` (None: a fixed page size).
    :param where: how errors name the request (``offsets [100, 200)``, ``page 2 (offsets [100, 200))``).
    :param start: the offset of the answer's first record.
    """

    send: Send
    skip: int
    take: int
    most: int
    size_param: str | None
    where: str
    start: int = 0


@functools.lru_cache(maxsize=256)
def parsed(template: str) -> tuple[tuple[str, str | None, str], ...]:
    """``template`` as (text, placeholder, format spec) parts (checked by the config already)."""
    return tuple((text, name, spec or "") for text, name, spec, _ in _FORMATTER.parse(template))


def plain(value: Any) -> Any:
    """A value as a template that is exactly its placeholder gives it: a time as ISO 8601 text, others as they are."""
    return value.isoformat() if isinstance(value, datetime) else value


def render(template: str, values: Mapping[str, Any]) -> Any:
    """The template filled in: exactly one placeholder without a format spec keeps its value's type (see
    :func:`plain`); anything else is text."""
    parts = parsed(template)
    if len(parts) == 1 and not parts[0][0] and parts[0][1] is not None and not parts[0][2]:
        return plain(values[parts[0][1]])
    return "".join(text + ("" if name is None else format(values[name], spec)) for text, name, spec in parts)


def render_json(value: Any, values: Mapping[str, Any]) -> Any:
    """A JSON body with each of its strings rendered as a template."""
    if isinstance(value, str):
        return render(value, values)
    if isinstance(value, Mapping):
        return {key: render_json(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [render_json(item, values) for item in value]
    return value


def template_values(task: str, ref: datetime, window: tuple[datetime, datetime], tz: tzinfo) -> dict[str, Any]:
    """The values every request of a run shares: the data set's id, and the reference time and window expressed in
    the source's zone (``filter.timezone``), so ``{window_start:%Y-%m-%d %H:%M:%S}`` is the source's wall time."""
    start, end = window
    return {
        "task": task,
        "ref": ref.astimezone(tz),
        "window_start": start.astimezone(tz),
        "window_end": end.astimezone(tz),
    }


@dataclass(frozen=True)
class Paging:
    """The page requests of a source: its paginator and request templates, the task's batch size (a page
    paginator's page size) and the run's template values (:func:`template_values`). ``filtered``: the requests
    of the filtered view of the run's window (``source.window_filter``): its count, and its pages numbered from 0."""

    source: SourceConfig
    batch_size: int
    values: Mapping[str, Any]
    filtered: bool = False

    @classmethod
    def outside_a_run(cls, source: SourceConfig, task: str, batch_size: int) -> Paging:
        """The requests of a hook outside a crawl run (the status view's total): the times are now."""
        now = datetime.now(UTC)
        return cls(source, batch_size, template_values(task, now, (now, now), UTC))

    @classmethod
    def of_task(
        cls,
        cfg: CrawlTaskConfig,
        ref: datetime | None = None,
        window: tuple[datetime, datetime] | None = None,
        filtered: bool = False,
    ) -> Paging:
        """The requests of a crawl task, for a run with reference time ``ref`` and date window ``window`` (default:
        now, outside a run); ``filtered``: of the window's filtered view."""
        now = datetime.now(UTC)
        values = template_values(cfg.source_task, ref or now, window or (now, now), ZoneInfo(cfg.filter.timezone))
        return cls(cfg.source, cfg.batch_size, values, filtered and cfg.source.window_filter is not None)

    def count_request(self) -> tuple[Send, str] | None:
        """The request of the total (of the filtered view when ``filtered``) and the JSON path of the total in its
        answer (``source.total_header``: the header it is read from instead, kept with the answer); None when the
        source has no count endpoint (the total is probed from pages)."""
        source, window = self.source, self.source.window_filter if self.filtered else None
        if window and window.count_path:
            path = str(render(window.count_path, self.values))
        elif source.count_path is not None:
            path = source.count_path.replace("{task}", str(self.values["task"]))
        else:
            return None
        query = window.count_templates() if window else {}
        params = {name: render(template, self.values) for name, template in query.items()}
        total_path = (window.total_path if window else None) or source.total_path
        kept = () if source.total_header is None else (source.total_header.lower(),)
        return Send(path, params, answer_headers=kept), total_path

    def calls(self, lo: int, hi: int) -> list[PageCall]:
        """The requests that read offsets ``[lo, hi)``, as the paginator cuts them (:meth:`Paginator.slices`)."""
        return [self.call(*piece) for piece in self.source.paginator.slices(lo, hi, self.batch_size)]

    def call(self, offset: int, limit: int, page: int | None, skip: int, take: int, where: str) -> PageCall:
        values = {**self.values, "offset": offset, "limit": limit, "page": page, "page_size": limit}
        request, window = self.source.request, self.source.window_filter if self.filtered else None
        query = {**self.source.page_query, **(window.query if window else {})}
        params = {name: render(template, values) for name, template in query.items()}
        headers = {name: str(render(template, values)) for name, template in request.headers.items()}
        path = str(render(self.source.request_path, values))
        body = render_json(request.body, values)
        if window and window.body:
            body = {**(body if isinstance(body, Mapping) else {}), **render_json(window.body, values)}
        send = Send(path, params, request.method, headers, body)
        size_param = self.source.paginator.size_name(self.source.limit_param)
        return PageCall(send, skip, take, limit, size_param, where, offset)

    def whole(self, call: PageCall) -> str | None:
        """Why ``call`` cannot be read in smaller requests (:meth:`parts`); None when it can."""
        if call.most <= 1:
            return "it is a single record"
        return self.source.paginator.whole()

    def parts(self, call: PageCall) -> list[PageCall]:
        """The smaller requests that read what ``call`` takes, in order, for an answer too large or too slow (when
        :meth:`whole` finds no reason against), as the paginator cuts them (:meth:`Paginator.parts`)."""
        lo, hi = call.start + call.skip, call.start + call.skip + call.take
        return [self.call(*piece) for piece in self.source.paginator.parts(lo, hi, call.most)]

    def reader(
        self, call: PageCall, fields: tuple[str, ...], task: str, split: Split | None = None
    ) -> Callable[[bytes], Page]:
        """Decodes the answer to ``call`` (:func:`read_call`); errors name ``task`` and the request."""
        label = f"{task}: {call.send.method} {call.send.path} {call.where}"
        return functools.partial(
            read_call, call=call, records_path=self.source.records_path, fields=fields, label=label, split=split
        )

    def check_view_page(self, received: int, lo: int, hi: int, task: str) -> None:
        """A page of this filtered view holds every record of the offsets it was asked: they lie below the view's count,
        so a shorter page means the source's filter drops records its count includes (:class:`SourceError`, not
        retried: the run fails rather than miss them)."""
        if not self.filtered or received == hi - lo:
            return
        start, end = self.values["window_start"], self.values["window_end"]
        raise SourceError(
            f"task {task}: window filter: the source counts at least {hi} records dated in [{start.isoformat()}, "
            f"{end.isoformat()}), but its page of offsets [{lo}, {hi}) of that filtered view holds {received} records "
            f"instead of {hi - lo}: its filter drops records its count includes (or the window changed); the run fails "
            "rather than miss them",
            retriable=False,
        )


def read_call(
    body: bytes, call: PageCall, records_path: str, fields: tuple[str, ...], label: str, split: Split | None = None
) -> Page:
    """The records ``call`` takes of its answer's body. A page longer than asked for fails: retriably when the
    source ignored the size it was sent, for good when its fixed page size is not the batch size."""
    try:
        page = decode_page(body, records_path, fields, call.most, call.size_param or "", split)
    except PageTooLongError as exc:
        if call.size_param is not None:
            raise
        raise SourceError(
            f"{label} holds more than {call.most} records: the source's fixed page size is larger than batch_size "
            f"({call.most}); set batch_size to the source's page size",
            retriable=False,
        ) from exc
    if call.skip == 0 and len(page) <= call.take:
        return page
    end = call.skip + call.take
    heads = None if page.heads is None else page.heads[call.skip : end]
    return Page(page[call.skip : end], page.fields, heads, page.utf8_checked)


def join_pages(pages: Sequence[Page]) -> Page:
    """The records of consecutive pages as one page (the values of their fields kept when each has them)."""
    if len(pages) == 1:
        return pages[0]
    if not pages:  # no offsets asked for
        return Page([])
    records = [record for page in pages for record in page]
    heads = None if any(p.heads is None for p in pages) else [h for p in pages for h in p.heads or ()]
    return Page(records, pages[0].fields, heads, all(p.utf8_checked for p in pages))


def probe_total(read: Callable[[int, int], Sized], size: int, label: str, known: int | None = None) -> int:
    """The number of records of a source read in pages of ``size`` records: ``read(offset, size)`` holds the
    records of offsets ``[offset, offset + size)`` there are.

    Gallops from the page holding ``known`` (a total the source had before; none: from the first page) up 1, 2,
    4, ... pages to the first page not full, or down to the last full one, bisects to the first page not full, and
    counts its records: about ``2 log2(change / size)`` reads, so 3 when the total moved within a page. A short
    page that is not empty is checked to be the last: when the page after it has records, the short page is read
    again, and if it is still short the source serves smaller pages than asked (:class:`SourceError`); if it filled
    up meanwhile, the total it had at its first read is the answer (records are only appended: every page below it
    was full by then).
    """
    counts: dict[int, int] = {}

    def full(index: int) -> bool:
        counts[index] = len(read(index * size, size))
        return counts[index] >= size

    # Every page up to lo is full (lo = -1: none), page hi is not.
    hi = max(0, known or 0) // size
    if full(hi):
        lo, step = hi, 1
        while full(hi := lo + step):
            lo, step = hi, step * 2
    else:
        lo, step = hi - 1, 1
        while lo >= 0 and not full(lo):
            hi, step = lo, step * 2
            lo = hi - step
        lo = max(lo, -1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if full(mid):
            lo = mid
        else:
            hi = mid
    total = hi * size + counts[hi]
    if counts[hi] == 0 or len(read((hi + 1) * size, size)) == 0 or full(hi):
        return total
    raise SourceError(
        f"{label}: probing the total (no count endpoint), page {hi} of {size} records holds {counts[hi]}, and the "
        "page after it has records: the source serves fewer records per page than asked; set batch_size to its "
        "page size",
        retriable=False,
    )
