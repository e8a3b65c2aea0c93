"""Raw ASGI application serving the demo job postings source.

All state lives in memory in a :class:`DemoSource` instance. Routes:

* ``GET /healthz``
* ``GET /api/{task}/count`` and ``GET /api/{task}/list?offset=&limit=``
* ``GET /admin/tasks`` and ``GET|PUT|DELETE /admin/tasks/{task}``
* ``POST /admin/tasks/{task}/append`` and ``POST /admin/tasks/{task}/truncate``
* ``GET|PUT|DELETE /admin/tasks/{task}/faults``
* ``GET|DELETE /admin/tasks/{task}/requests``
* ``GET /admin/tasks/{task}/in_flight`` (data requests being answered now, and the most at once)
* ``GET /admin/tasks/{task}/truth?ref=&days=&tolerance_s=``
* the paging modes of :mod:`demo_source.paging`: ``GET /api/{task}/pages``, ``POST /api/{task}/search``, and a
  count endpoint that answers 404 (a task's ``paging`` options)
* ``GET /api/{task}/feed``: the records newest first, each page naming the next by a cursor, a next link or a Link
  header (a task's ``feed`` options, :mod:`demo_source.feed`)
* ``from`` and ``to`` on the page routes and ``/count``: the records dated in a window (``demo_source.window``)
* ``POST /oauth/{task}/token``, ``GET /admin/tasks/{task}/auth``, ``POST /admin/tasks/{task}/auth/revoke``: a task
  created with ``auth`` wants it on its ``/api`` requests (``demo_source.auth``)
* error codes in HTTP 200 bodies, and pages too large or too slow unless asked smaller (a task's ``envelopes``
  options, :mod:`demo_source.envelopes`)

With an admin token (``DEMO_SOURCE_ADMIN_TOKEN``, which ``dev/stack.py`` sets) every ``/admin`` route wants
``Authorization: Bearer <token>`` and answers 401 without it.

Every body is JSON; errors are ``{"code": <status>, "msg": "..."}``.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import hmac
import itertools
import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Final, TypeVar
from urllib.parse import parse_qsl

import msgspec

from demo_source.auth import AuthOptions, AuthState
from demo_source.data import (
    NO_FAULTS,
    Faults,
    NonNegativeInt,
    TaskConfig,
    TaskState,
    ground_truth,
    make_page,
    make_record,
    parse_ref,
    task_seed,
    utc_midnight,
)
from demo_source.envelopes import EnvelopeOptions, Envelopes
from demo_source.feed import FeedOptions, serve_feed
from demo_source.order import OLDEST_FIRST, Order, served_records
from demo_source.paging import ROUTES as PAGING_ROUTES
from demo_source.paging import PagingError, PagingOptions, Reader
from demo_source.window import Views, WindowOptions, page_offsets, view_count, window_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[["Request"], Awaitable["Response"]]
T = TypeVar("T")

MAX_LIMIT: Final[int] = 1000
DEFAULT_LIMIT: Final[int] = 100
MAX_BODY_BYTES: Final[int] = 1 << 20
#: Request-log entries kept per task; later requests are only counted.
REQUEST_LOG_CAP: Final[int] = 200_000
#: Byte budget of the encoded-page cache shared by all tasks.
PAGE_CACHE_BYTES: Final[int] = 64 << 20

_API_PARTS: Final[int] = 3
_ADMIN_TASK_PARTS: Final[int] = 3
_JSON_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = ((b"content-type", b"application/json"),)
logger = logging.getLogger(__name__)
_ENCODER: Final[msgspec.json.Encoder] = msgspec.json.Encoder()
_GENERATIONS: Final[itertools.count[int]] = itertools.count(1)


class HttpError(Exception):
    """An error answered as ``{"code": status, "msg": msg}``."""

    def __init__(self, status: int, msg: str) -> None:
        """Create the error.

        :param status: HTTP status code.
        :param msg: human-readable message.
        """
        super().__init__(msg)
        self.status = status
        self.msg = msg


class TaskBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of ``PUT /admin/tasks/{task}``; omitted fields use defaults."""

    total: NonNegativeInt
    seed: int | None = None
    ref: str | None = None
    window_days: int = 7
    in_window_share: float = 0.3
    history_days: int = 365
    append_step_s: int = 60
    city_codes: bool = False
    paging: PagingOptions = msgspec.field(default_factory=PagingOptions)
    auth: AuthOptions | None = None
    feed: FeedOptions = msgspec.field(default_factory=FeedOptions)
    window: WindowOptions = msgspec.field(default_factory=WindowOptions)
    envelopes: EnvelopeOptions = msgspec.field(default_factory=EnvelopeOptions)
    order: Order = OLDEST_FIRST


class AppendBody(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST /admin/tasks/{task}/append``."""

    n: Annotated[int, msgspec.Meta(ge=0, le=1_000_000_000)]


class TruncateBody(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST /admin/tasks/{task}/truncate``."""

    total: NonNegativeInt


@dataclass(frozen=True)
class Request:
    """The parts of an HTTP request the handlers need."""

    method: str
    task_id: str
    query: dict[str, str]
    body: bytes
    headers: dict[bytes, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    """An HTTP response with a JSON body."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def json_response(payload: object, status: int = 200) -> Response:
    """Encode ``payload`` as a JSON response.

    :param payload: any msgspec-encodable value.
    :param status: HTTP status code.
    :return: the response.
    """
    return Response(status, _ENCODER.encode(payload))


def error_response(status: int, msg: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Response:
    """Build the standard error response.

    :param status: HTTP status code.
    :param msg: human-readable message.
    :param headers: extra headers (e.g. ``Retry-After``).
    :return: the response.
    """
    return Response(status, _ENCODER.encode({"code": status, "msg": msg}), headers)


def ok_response(data: object) -> Response:
    """Wrap ``data`` in the source's success envelope.

    :param data: the ``data`` member.
    :return: ``{"code": 0, "msg": "ok", "data": data}`` with status 200.
    """
    return json_response({"code": 0, "msg": "ok", "data": data})


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode and validate a JSON request body.

    :param body: raw request body.
    :param kind: the msgspec type to decode into.
    :return: the decoded value.
    :raises HttpError: 400 on invalid JSON or values.
    """
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise HttpError(400, f"invalid body: {exc}") from exc


def query_int(query: dict[str, str], name: str, default: int) -> int:
    """Read an integer query parameter.

    :param query: parsed query string.
    :param name: parameter name.
    :param default: value when absent.
    :return: the integer.
    :raises HttpError: 400 if the value is not an integer.
    """
    text = query.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise HttpError(400, f"{name} must be an integer") from exc


def query_float(query: dict[str, str], name: str, default: float) -> float:
    """Read a non-negative number from the query string.

    :param query: parsed query string.
    :param name: parameter name.
    :param default: value when absent.
    :return: the number.
    :raises HttpError: 400 if the value is not a non-negative number.
    """
    text = query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError as exc:
        raise HttpError(400, f"{name} must be a number") from exc
    if not value >= 0:
        raise HttpError(400, f"{name} must be >= 0")
    return value


class PageCache:
    """LRU cache of encoded record arrays, bounded by total bytes.

    Keys carry the task's generation (bumped whenever config or faults
    change) and the exact offset range, so append/truncate never serve stale
    content: the envelope with the current total is built per request.
    """

    def __init__(self, max_bytes: int) -> None:
        """Create an empty cache.

        :param max_bytes: byte budget; 0 disables caching.
        """
        self.max_bytes = max_bytes
        self.size = 0
        self._items: OrderedDict[tuple[int, int, int], bytes] = OrderedDict()

    def get(self, key: tuple[int, int, int]) -> bytes | None:
        """Return a cached value and mark it recently used.

        :param key: ``(generation, start, end)``.
        :return: the encoded array, or ``None``.
        """
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: tuple[int, int, int], value: bytes) -> None:
        """Store a value, evicting the least recently used ones.

        :param key: ``(generation, start, end)``.
        :param value: the encoded array.
        """
        if len(value) > self.max_bytes or key in self._items:
            return
        self._items[key] = value
        self.size += len(value)
        while self.size > self.max_bytes:
            _, dropped = self._items.popitem(last=False)
            self.size -= len(dropped)


@dataclass
class TaskRuntime:
    """In-memory runtime of one task: data state, faults and request log."""

    task_id: str
    state: TaskState
    faults: Faults = NO_FAULTS
    generation: int = field(default_factory=lambda: next(_GENERATIONS))
    rng: random.Random = field(default_factory=random.Random)
    fail_offsets: list[int] = field(default_factory=list)
    fault_list_seq: int = 0
    paging: PagingOptions = field(default_factory=PagingOptions)
    log: list[tuple[int | None, int | None, int, dict[str, Any] | None]] = field(default_factory=list)
    log_dropped: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    peak_in_flight: int = 0
    auth: AuthState | None = None
    feed: FeedOptions = field(default_factory=FeedOptions)
    window: WindowOptions = field(default_factory=WindowOptions)
    views: Views = field(default_factory=Views)
    envelopes: Envelopes = field(default_factory=Envelopes)
    order: Order = OLDEST_FIRST

    def __post_init__(self) -> None:
        """Seed the fault RNG from the task's seed."""
        self.set_faults(self.faults)

    @property
    def config(self) -> TaskConfig:
        """Return the task's configuration."""
        return self.state.config

    def set_faults(self, faults: Faults) -> None:
        """Replace the fault set and restart its random sequence.

        :param faults: the new faults.
        """
        self.faults = faults
        self.generation = next(_GENERATIONS)
        self.rng = random.Random(self.config.seed)
        self.fail_offsets = sorted(set(faults.fail_offsets))
        self.fault_list_seq = 0

    def clear_requests(self) -> None:
        """Forget the request log, the request counters and the peak of requests in flight."""
        self.log = []
        self.log_dropped = 0
        self.counters = {}
        self.peak_in_flight = self.in_flight

    def request_started(self) -> None:
        """A data request (count or list) is being answered: count it in flight, raise the peak."""
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def request_finished(self) -> None:
        """A data request was answered."""
        self.in_flight -= 1

    def count(self, name: str) -> None:
        """Increment a request counter.

        :param name: counter name.
        """
        self.counters[name] = self.counters.get(name, 0) + 1

    def record_list(
        self, offset: int | None, limit: int | None, status: int, entry: dict[str, Any] | None = None
    ) -> None:
        """Append a list request to the log (or only count it past the cap).

        :param offset: requested offset, ``None`` if unparseable.
        :param limit: requested limit, ``None`` if unparseable.
        :param status: the answered status.
        :param entry: more of the request to log (method, route, page, body: :mod:`demo_source.paging`).
        """
        self.count("list")
        self.count(f"list_{status}")
        if len(self.log) < REQUEST_LOG_CAP:
            self.log.append((offset, limit, status, entry))
        else:
            self.log_dropped += 1

    def fails_in(self, start: int, end: int) -> bool:
        """Tell whether a ``fail_offsets`` entry lies in ``[start, end)``.

        :param start: first offset served.
        :param end: one past the last offset served.
        :return: ``True`` if the request must fail.
        """
        index = bisect.bisect_left(self.fail_offsets, start)
        return index < len(self.fail_offsets) and self.fail_offsets[index] < end

    def draw(self, rate: float) -> bool:
        """Draw from the task's RNG (only when ``rate`` is positive).

        :param rate: probability of ``True``.
        :return: whether the event happens.
        """
        return rate > 0 and self.rng.random() < rate

    def describe(self) -> dict[str, Any]:
        """Return the admin view of the task.

        :return: config, total, faults and request counters.
        """
        return {
            "task": self.task_id,
            "config": self.config.to_json(),
            "total": self.state.total,
            "faults": msgspec.to_builtins(self.faults),
            "paging": msgspec.to_builtins(self.paging),
            "envelopes": dict(self.envelopes.answered),
            "order": self.order,
            "requests": {
                **self.counters,
                "logged": len(self.log),
                "dropped": self.log_dropped,
            },
        }


class DemoSource:
    """The ASGI application; one instance holds all tasks in memory."""

    def __init__(self, default_total: int, default_ref: datetime | None, admin_token: str | None = None) -> None:
        """Create the application.

        :param default_total: ``total0`` of tasks created on first sight.
        :param default_ref: their reference time (default: today's UTC midnight).
        :param admin_token: when set, every ``/admin/...`` request must carry ``Authorization: Bearer <token>``
            (else 401); ``/api`` and ``/healthz`` stay open, as a crawled source's are.
        """
        self.admin_authorization = None if admin_token is None else f"Bearer {admin_token}".encode()
        if default_total < 0:
            msg = "default_total must be >= 0"
            raise ValueError(msg)
        self.default_total = default_total
        self.default_ref = utc_midnight() if default_ref is None else default_ref
        self.tasks: dict[str, TaskRuntime] = {}
        self.cache = PageCache(PAGE_CACHE_BYTES)
        self._routes = self._build_routes()

    def _build_routes(self) -> dict[tuple[str, ...], dict[str, Handler]]:
        """Map path patterns (``"*"`` = task id) to handlers per method.

        :return: the routing table.
        """
        return {
            ("healthz",): {"GET": self.healthz},
            ("api", "*", "count"): {"GET": self.count},
            ("api", "*", "list"): {"GET": self.list_records},
            ("api", "*", "feed"): {"GET": self.feed},
            ("admin", "tasks"): {"GET": self.list_tasks},
            ("admin", "tasks", "*"): {"GET": self.get_task, "PUT": self.put_task, "DELETE": self.delete_task},
            ("admin", "tasks", "*", "append"): {"POST": self.append},
            ("admin", "tasks", "*", "truncate"): {"POST": self.truncate},
            ("admin", "tasks", "*", "faults"): {
                "GET": self.get_faults,
                "PUT": self.put_faults,
                "DELETE": self.delete_faults,
            },
            ("admin", "tasks", "*", "requests"): {
                "GET": self.get_requests,
                "DELETE": self.delete_requests,
            },
            ("admin", "tasks", "*", "truth"): {"GET": self.truth},
            ("admin", "tasks", "*", "in_flight"): {"GET": self.get_in_flight},
            **{
                pattern: {method: functools.partial(self.paged, read=read) for method, read in readers.items()}
                for pattern, readers in PAGING_ROUTES.items()
            },
            ("oauth", "*", "token"): {"POST": self.token},
            ("admin", "tasks", "*", "auth"): {"GET": self.get_auth},
            ("admin", "tasks", "*", "auth", "revoke"): {"POST": self.revoke_auth},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point.

        :param scope: connection scope.
        :param receive: ASGI receive callable.
        :param send: ASGI send callable.
        """
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            response = await self._dispatch(scope, receive)
        except HttpError as exc:
            response = error_response(exc.status, exc.msg)
        except Exception as exc:
            logger.exception("unhandled error on %s %s", scope["method"], scope["path"])
            response = error_response(500, f"internal error: {type(exc).__name__}")
        await _send_response(send, response)

    async def _dispatch(self, scope: Scope, receive: Receive) -> Response:
        """Route a request to its handler.

        :param scope: connection scope.
        :param receive: ASGI receive callable.
        :return: the response.
        :raises HttpError: 404 / 405 / 413 / 400 on routing or body errors.
        """
        parts = tuple(part for part in scope["path"].split("/") if part)
        if parts[:1] == ("admin",) and not self._admin_allowed(scope):
            return error_response(401, "the admin API wants the stack's token", ((b"www-authenticate", b"Bearer"),))
        index = _task_index(parts)
        pattern = tuple("*" if i == index else p for i, p in enumerate(parts))
        methods = self._routes.get(pattern)
        if methods is None:
            raise HttpError(404, f"not found: {scope['path']}")
        handler = methods.get(scope["method"])
        if handler is None:
            raise HttpError(405, f"method {scope['method']} not allowed")
        body = await _read_body(receive) if scope["method"] in ("PUT", "POST") else b""
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        task_id = parts[index] if index is not None else ""
        headers = dict(scope.get("headers", ()))
        auth = self.tasks[task_id].auth if parts[0] == "api" and task_id in self.tasks else None
        if auth is not None and not auth.allows(headers, query):
            if expired := self.tasks[task_id].envelopes.expired():
                return Response(200, expired)
            return error_response(401, "missing, expired or unknown credentials", ((b"www-authenticate", b"Bearer"),))
        return await handler(Request(scope["method"], task_id, query, body, headers))

    def _admin_allowed(self, scope: Scope) -> bool:
        """Whether the request may use the admin API: no token configured, or the right one sent."""
        if self.admin_authorization is None:
            return True
        sent = dict(scope.get("headers", ())).get(b"authorization", b"")
        return hmac.compare_digest(sent, self.admin_authorization)

    def _task(self, task_id: str) -> TaskRuntime:
        """Return a task's runtime, creating it with defaults on first sight.

        :param task_id: the task id.
        :return: the runtime.
        """
        runtime = self.tasks.get(task_id)
        if runtime is None:
            config = TaskConfig(
                total0=self.default_total,
                seed=task_seed(task_id),
                ref=self.default_ref,
                task_id=task_id,
            )
            runtime = TaskRuntime(task_id, TaskState(config))
            self.tasks[task_id] = runtime
        return runtime

    async def healthz(self, request: Request) -> Response:
        """Answer the health check.

        :return: ``{"status": "ok"}``.
        """
        return json_response({"status": "ok"})

    async def count(self, request: Request) -> Response:
        """Answer ``GET /api/{task}/count`` (honours latency and error_rate).

        :return: the total in the success envelope, or an injected error.
        """
        runtime = self._task(request.task_id)
        if not runtime.paging.count:
            return error_response(404, f"not found: /api/{request.task_id}/count (this source has no count)")
        runtime.count("count")
        runtime.request_started()
        try:
            faults = runtime.faults
            if faults.latency_ms:
                await asyncio.sleep(faults.latency_ms / 1000)
            if runtime.draw(faults.error_rate):
                return error_response(faults.error_status, "injected error")
            window = window_of(request.query)
            if window is not None:
                return ok_response({"total": view_count(self._view(runtime, window), runtime.window)})
            return ok_response({"total": runtime.state.total})
        except ValueError as exc:
            return error_response(400, f"invalid from/to: {exc}")
        finally:
            runtime.request_finished()

    async def list_records(self, request: Request) -> Response:
        """Answer ``GET /api/{task}/list`` and log the outcome.

        :return: a page of records, or an error.
        """
        return await self.paged(request, read_list)

    async def _list_page(self, runtime: TaskRuntime, offset: int, limit: int) -> Response:
        """Apply validation and faults to a list request, then build the page.

        :param runtime: the task.
        :param offset: requested offset.
        :param limit: requested page size.
        :return: the response.
        :raises HttpError: 400 on an invalid offset or limit.
        """
        if offset < 0:
            raise HttpError(400, "offset must be >= 0")
        if not 1 <= limit <= MAX_LIMIT:
            raise HttpError(400, f"limit must be within [1, {MAX_LIMIT}]")
        faults = runtime.faults
        if faults.latency_ms:
            await asyncio.sleep(faults.latency_ms / 1000)
        runtime.fault_list_seq += 1
        if faults.rate_limit_every and runtime.fault_list_seq % faults.rate_limit_every == 0:
            retry = (b"retry-after", str(faults.retry_after_s).encode())
            return error_response(429, "rate limited", (retry,))
        total = runtime.state.total
        end = min(offset + limit, total)
        if runtime.fails_in(offset, end):
            return error_response(faults.fail_status, "injected failure at offset")
        if runtime.draw(faults.error_rate):
            return error_response(faults.error_status, "injected error")
        if faults.short_pages and end > offset and end - offset == limit:
            end -= 1
        return self._page_response(runtime, offset, end, total)

    def _page_response(self, runtime: TaskRuntime, start: int, end: int, total: int) -> Response:
        """Build a successful list response, applying shape/malformed faults.

        :param runtime: the task.
        :param start: first offset served.
        :param end: one past the last offset served.
        :param total: total reported in the envelope.
        :return: the response.
        """
        records = self._encoded_records(runtime, start, end)
        faults = runtime.faults
        if faults.wrong_shape:
            body = b'{"code":0,"data":{"items":' + records + b"}}"
        else:
            head = b'{"code":0,"msg":"ok","data":{"total":%d,"data":' % total
            body = head + records + b"}}"
        if runtime.draw(faults.malformed_rate):
            body = body[: max(1, len(body) // 2)]
        return Response(200, body)

    def _encoded_records(self, runtime: TaskRuntime, start: int, end: int) -> bytes:
        """Return the JSON array of records ``start .. end - 1`` (cached).

        :param runtime: the task.
        :param start: first offset.
        :param end: one past the last offset.
        :return: the encoded array.
        """
        if end <= start:
            return b"[]"
        if runtime.order != OLDEST_FIRST:  # each append moves every record: not cached
            return _ENCODER.encode(
                served_records(runtime.config, start, end, runtime.state.total, runtime.order, runtime.faults)
            )
        key = (runtime.generation, start, end)
        encoded = self.cache.get(key)
        if encoded is None:
            encoded = _ENCODER.encode(make_page(runtime.config, start, end, runtime.faults))
            self.cache.put(key, encoded)
        return encoded

    async def paged(self, request: Request, read: Reader) -> Response:
        """Answer a page request (``/list``, or a route of :mod:`demo_source.paging`) with the offsets its reader finds
        in the request, and log the outcome.

        :return: a page of records, or an error.
        """
        runtime = self._task(request.task_id)
        offset: int | None = None
        limit: int | None = None
        entry: dict[str, Any] | None = None
        runtime.request_started()
        try:
            offset, limit, entry = read(runtime.paging, request.query, request.body)
            window = window_of(request.query)
            enveloped = await runtime.envelopes.answer(offset, limit, runtime.auth)
            if enveloped:
                response = Response(200, enveloped)
            elif window is None:
                response = await self._list_page(runtime, offset, limit)
            else:
                entry = {**(entry or {}), "from": request.query["from"], "to": request.query["to"]}
                response = self._view_page(runtime, window, offset, limit)
        except PagingError as exc:
            entry, response = exc.entry, error_response(400, str(exc))
        except HttpError as exc:
            response = error_response(exc.status, exc.msg)
        except ValueError as exc:
            response = error_response(400, f"invalid from/to: {exc}")
        finally:
            runtime.request_finished()
        runtime.record_list(offset, limit, response.status, entry)
        return response

    async def feed(self, request: Request) -> Response:
        """Answer ``GET /api/{task}/feed`` (:mod:`demo_source.feed`) and log it."""
        runtime = self._task(request.task_id)
        host = request.headers.get(b"host", b"").decode()
        answer = serve_feed(runtime.config, runtime.state.total, runtime.feed, request.query, host)
        runtime.record_list(answer.offset, answer.served, answer.status, answer.entry)
        return Response(answer.status, answer.body, answer.headers)

    def _view(self, runtime: TaskRuntime, window: tuple[int, int]) -> list[int]:
        """The offsets of the task's records dated in ``window`` (:mod:`demo_source.window`)."""
        return runtime.views.offsets(runtime.config, runtime.generation, runtime.state.total, window)

    def _view_page(self, runtime: TaskRuntime, window: tuple[int, int], offset: int, limit: int) -> Response:
        """Records ``[offset, offset + limit)`` of the filtered view of ``window`` (``total``: the view's size)."""
        if offset < 0 or not 1 <= limit <= MAX_LIMIT:
            raise HttpError(400, f"offset must be >= 0 and limit within [1, {MAX_LIMIT}]")
        view = self._view(runtime, window)
        records = [
            make_record(runtime.config, o, runtime.faults) for o in page_offsets(view, offset, limit, runtime.window)
        ]
        return ok_response({"total": len(view), "data": records})

    async def list_tasks(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks``.

        :return: ``{"tasks": [ids...]}``.
        """
        return json_response({"tasks": sorted(self.tasks)})

    async def get_task(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}``.

        :return: the task's admin view.
        """
        runtime = self._task(request.task_id)
        return json_response(runtime.describe())

    async def put_task(self, request: Request) -> Response:
        """(Re)create a task from ``PUT /admin/tasks/{task}``.

        Faults, the request log and the counters start empty.

        :return: the task's admin view.
        :raises HttpError: 400 on an invalid configuration.
        """
        spec = decode_body(request.body, TaskBody)
        try:
            ref = self.default_ref if spec.ref is None else parse_ref(spec.ref)
            config = TaskConfig(
                total0=spec.total,
                seed=task_seed(request.task_id) if spec.seed is None else spec.seed,
                ref=ref,
                window_days=spec.window_days,
                in_window_share=spec.in_window_share,
                history_days=spec.history_days,
                append_step_s=spec.append_step_s,
                task_id=request.task_id,
                city_codes=spec.city_codes,
            )
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc
        auth = None if spec.auth is None else AuthState(spec.auth)
        created = TaskRuntime(
            request.task_id,
            TaskState(config),
            paging=spec.paging,
            auth=auth,
            feed=spec.feed,
            window=spec.window,
            envelopes=Envelopes(spec.envelopes),
            order=spec.order,
        )
        self.tasks[request.task_id] = created
        return json_response(created.describe())

    async def delete_task(self, request: Request) -> Response:
        """Forget a task: ``DELETE /admin/tasks/{task}`` (its data set, faults and request log; a later request
        for it meets a new task with the defaults).

        :return: ``{"deleted": true}``, or false when there was no such task.
        """
        return json_response({"deleted": self.tasks.pop(request.task_id, None) is not None})

    async def append(self, request: Request) -> Response:
        """Append records: ``POST /admin/tasks/{task}/append``.

        :return: ``{"total": new_total}``.
        """
        runtime = self._task(request.task_id)
        body = decode_body(request.body, AppendBody)
        return json_response({"total": runtime.state.append(body.n)})

    async def truncate(self, request: Request) -> Response:
        """Shrink the source: ``POST /admin/tasks/{task}/truncate``.

        :return: ``{"total": new_total}``.
        :raises HttpError: 400 if the new total is larger than the current one.
        """
        runtime = self._task(request.task_id)
        body = decode_body(request.body, TruncateBody)
        try:
            return json_response({"total": runtime.state.truncate(body.total)})
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc

    async def get_faults(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/faults``.

        :return: the active fault set.
        """
        runtime = self._task(request.task_id)
        return json_response(runtime.faults)

    async def put_faults(self, request: Request) -> Response:
        """Replace the fault set: ``PUT /admin/tasks/{task}/faults``.

        :return: the new fault set.
        """
        runtime = self._task(request.task_id)
        runtime.set_faults(decode_body(request.body, Faults))
        return json_response(runtime.faults)

    async def delete_faults(self, request: Request) -> Response:
        """Clear the fault set: ``DELETE /admin/tasks/{task}/faults``.

        :return: the (empty) fault set.
        """
        runtime = self._task(request.task_id)
        runtime.set_faults(NO_FAULTS)
        return json_response(runtime.faults)

    async def get_requests(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/requests``.

        :return: ``{"requests": [{"offset", "limit", "status"}...],
            "count": all list requests, "dropped": requests past the cap}``.
        """
        runtime = self._task(request.task_id)
        entries = [
            {"offset": offset, "limit": limit, "status": status, **(entry or {})}
            for offset, limit, status, entry in runtime.log
        ]
        return json_response(
            {
                "requests": entries,
                "count": len(entries) + runtime.log_dropped,
                "dropped": runtime.log_dropped,
            }
        )

    async def get_in_flight(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/in_flight``: the task's data requests (count and list) being answered
        now, and the most that were at once since the task was created or its request log cleared.

        :return: ``{"in_flight": n, "peak": most}``.
        """
        runtime = self._task(request.task_id)
        return json_response({"in_flight": runtime.in_flight, "peak": runtime.peak_in_flight})

    async def delete_requests(self, request: Request) -> Response:
        """Clear the request log: ``DELETE /admin/tasks/{task}/requests``.

        :return: ``{"cleared": number_of_entries_forgotten}``.
        """
        runtime = self._task(request.task_id)
        cleared = len(runtime.log) + runtime.log_dropped
        runtime.clear_requests()
        return json_response({"cleared": cleared})

    async def token(self, request: Request) -> Response:
        """Answer ``POST /oauth/{task}/token`` with the task's auth (404 for a task without OAuth2).

        :return: the token, or the OAuth2 error.
        """
        auth = self._auth(request.task_id)
        if auth.options.token_latency_ms:
            await asyncio.sleep(auth.options.token_latency_ms / 1000)
        status, answer = auth.grant(request.headers, request.body)
        return json_response(answer, status)

    async def get_auth(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/auth``: the token requests and refusals so far.

        :return: :meth:`AuthState.describe`.
        """
        return json_response(self._auth(request.task_id).describe())

    async def revoke_auth(self, request: Request) -> Response:
        """Revoke every access token of the task: ``POST /admin/tasks/{task}/auth/revoke``.

        :return: ``{"revoked": n}``.
        """
        return json_response({"revoked": self._auth(request.task_id).revoke()})

    def _auth(self, task_id: str) -> AuthState:
        runtime = self.tasks.get(task_id)
        if runtime is None or runtime.auth is None or runtime.auth.options.type != "oauth2":
            raise HttpError(404, f"task {task_id} has no OAuth2 auth")
        return runtime.auth

    async def truth(self, request: Request) -> Response:
        """Answer ``GET /admin/tasks/{task}/truth`` from the true dates.

        Query: ``ref`` (ISO, default the task's ref), ``days`` (default the
        task's window_days), ``tolerance_s`` (default 0).

        :return: ``in_window_ids``, ``in_window_count``, ``bad_date_ids``, ``total``.
        :raises HttpError: 400 on invalid parameters.
        """
        runtime = self._task(request.task_id)
        config = runtime.config
        days = query_float(request.query, "days", float(config.window_days))
        tolerance = query_float(request.query, "tolerance_s", 0.0)
        text = request.query.get("ref")
        try:
            ref = config.ref if text is None else parse_ref(text)
        except ValueError as exc:
            raise HttpError(400, "ref must be an ISO-8601 time") from exc
        truth = ground_truth(config, runtime.state.total, ref, days, tolerance, runtime.faults)
        return json_response(truth)


def read_list(_options: PagingOptions, query: dict[str, str], _body: bytes) -> tuple[int, int, None]:
    """The offsets of ``GET /api/{task}/list?offset=&limit=``.

    :raises HttpError: 400 if one is not an integer.
    """
    return query_int(query, "offset", 0), query_int(query, "limit", DEFAULT_LIMIT), None


def _task_index(parts: tuple[str, ...]) -> int | None:
    """Return where the task id sits in a split path, if anywhere.

    :param parts: the non-empty path segments.
    :return: 1 for ``/api/{task}/...``, 2 for ``/admin/tasks/{task}...``, else ``None``.
    """
    if len(parts) == _API_PARTS and parts[0] in ("api", "oauth"):
        return 1
    if len(parts) >= _ADMIN_TASK_PARTS and parts[:2] == ("admin", "tasks"):
        return 2
    return None


async def _read_body(receive: Receive) -> bytes:
    """Read a whole request body.

    :param receive: ASGI receive callable.
    :return: the body.
    :raises HttpError: 413 if it exceeds :data:`MAX_BODY_BYTES`.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HttpError(413, "request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_response(send: Send, response: Response) -> None:
    """Send a complete response in one body message.

    :param send: ASGI send callable.
    :param response: the response.
    """
    headers = [
        *_JSON_HEADERS,
        (b"content-length", str(len(response.body)).encode()),
        *response.headers,
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


async def _lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge ASGI lifespan start-up and shutdown.

    :param receive: ASGI receive callable.
    :param send: ASGI send callable.
    """
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_app(default_total: int, default_ref: datetime | None, admin_token: str | None = None) -> DemoSource:
    """Create the demo source ASGI application.

    :param default_total: ``total0`` of tasks first seen without a PUT.
    :param default_ref: their reference time; ``None`` means the current UTC
        day's midnight.
    :param admin_token: the token the admin API wants (``None``: the admin API is open).
    :return: the ASGI callable.
    """
    return DemoSource(default_total, default_ref, admin_token)
