"""What the demo source holds of one task in memory (its data state, faults, request log, options) and the cache of
encoded pages all tasks share."""

from __future__ import annotations

import bisect
import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from demo_source.auth import AuthState
from demo_source.data import (
    NO_FAULTS,
    Faults,
    TaskConfig,
    TaskState,
)
from demo_source.envelopes import Envelopes
from demo_source.feed import FeedOptions
from demo_source.order import OLDEST_FIRST, Order
from demo_source.paging import PagingOptions
from demo_source.window import Views, WindowOptions

#: Request-log entries kept per task; later requests are only counted.
REQUEST_LOG_CAP: Final[int] = 200_000
#: Byte budget of the encoded-page cache shared by all tasks.
PAGE_CACHE_BYTES: Final[int] = 64 << 20

_GENERATIONS: Final[itertools.count[int]] = itertools.count(1)


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
