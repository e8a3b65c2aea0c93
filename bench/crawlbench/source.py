"""The demo source: data sets with their ground truth, its request log, and plain page reads."""

from __future__ import annotations

import os
import secrets
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import msgspec

from crawlbench.common import REF, TOLERANCE_S, WINDOW_DAYS, BenchError
from crawlbench.topics import drop_topics_at_exit


def dataset_name() -> str:
    """A data set name no other run uses; its topics are named after it, and deleted when the benchmark ends."""
    return drop_topics_at_exit(f"bench_{secrets.token_hex(4)}")


@dataclass(frozen=True)
class Dataset:
    """One demo-source data set and its ground truth for the benchmark's window."""

    name: str
    total: int
    share: float
    batch: int
    in_window_ids: frozenset[str]

    @property
    def in_window(self) -> int:
        return len(self.in_window_ids)


@dataclass(frozen=True)
class RequestLog:
    """List requests the source saw for a data set since the last clear."""

    pages: int
    probes: int
    errors: int
    dropped: int


class SourceAdmin:
    """Admin client of the demo source: create data sets, ground truth, request log."""

    def __init__(self, url: str, token: str | None = None) -> None:
        # The stack's admin token: load_stack() put the stack's env (stack.json) into os.environ.
        token = token or os.environ.get("CRAWLER_OPS_SOURCE_ADMIN_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, timeout=300.0, headers=headers)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.status_code != httpx.codes.OK:
            raise BenchError(f"demo source: {method} {path} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def create(self, name: str, total: int, share: float, batch: int, ref: datetime = REF) -> Dataset:
        """(Re)create ``name`` around ``ref`` and read its truth for the 7-day window (+24 h)."""
        body = {"total": total, "in_window_share": share, "ref": ref.isoformat(), "window_days": int(WINDOW_DAYS)}
        self._json("PUT", f"/admin/tasks/{name}", json=body)
        return Dataset(name, total, share, batch, self.truth(name, ref))

    def put(self, name: str, **body: Any) -> None:
        """(Re)create ``name`` with the demo source's own options (``total``, ``ref``, ``window_days``, ...)."""
        self._json("PUT", f"/admin/tasks/{name}", json=body)

    def set_faults(self, name: str, **faults: Any) -> None:
        """Replace the data set's injected faults (``error_rate``, ``latency_ms``, ``rate_limit_every``, ...)."""
        self._json("PUT", f"/admin/tasks/{name}/faults", json=faults)

    def statuses(self, name: str) -> Counter[int]:
        """How many list requests since the last clear were answered with each HTTP status."""
        return Counter(r["status"] for r in self._json("GET", f"/admin/tasks/{name}/requests")["requests"])

    def truth(self, name: str, ref: datetime) -> frozenset[str]:
        """Ids of the records whose true date lies in ``[ref - 7 d, ref + 24 h]``."""
        truth = self._json(
            "GET",
            f"/admin/tasks/{name}/truth",
            params={"ref": ref.isoformat(), "days": WINDOW_DAYS, "tolerance_s": TOLERANCE_S},
        )
        return frozenset(truth["in_window_ids"])

    def set_latency(self, name: str, latency_ms: float) -> None:
        """Make every count and page request of ``name`` take ``latency_ms`` longer (the source's latency fault),
        as a remote source would; 0 clears it."""
        self.set_faults(name, latency_ms=latency_ms)

    def append(self, name: str, n: int) -> int:
        """Append ``n`` new records (dated after the data set's reference); returns the new total."""
        return int(self._json("POST", f"/admin/tasks/{name}/append", json={"n": n})["total"])

    def clear_requests(self, name: str) -> None:
        self._json("DELETE", f"/admin/tasks/{name}/requests")

    def requests(self, name: str) -> RequestLog:
        """Page requests (limit > 1), one-record probes, non-200 answers since the last clear."""
        log = self._json("GET", f"/admin/tasks/{name}/requests")
        entries = log["requests"]
        return RequestLog(
            pages=sum(1 for r in entries if r["limit"] != 1 and r["status"] == httpx.codes.OK),
            probes=sum(1 for r in entries if r["limit"] == 1),
            errors=sum(1 for r in entries if r["status"] != httpx.codes.OK),
            dropped=int(log.get("dropped", 0)),
        )


def get_page(client: httpx.Client, name: str, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """One page of records and its body size; raises BenchError on a non-200 answer."""
    response = client.get(f"/api/{name}/list", params={"offset": offset, "limit": limit})
    if response.status_code != httpx.codes.OK:
        raise BenchError(f"GET /api/{name}/list offset={offset}: HTTP {response.status_code}")
    return msgspec.json.decode(response.content)["data"]["data"], len(response.content)
