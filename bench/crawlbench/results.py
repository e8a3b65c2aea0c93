"""What one benchmark run measured: a row per variant, and everything for one total."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from crawlbench.source import RequestLog
from crawlbench.topics import KeyCheck


@dataclass
class Variant:
    """One measured variant: the numbers of the main table plus details for the JSON."""

    name: str
    wall_s: float
    pages: int | None
    fetched: int
    kept: int
    published: int
    rate: float
    rate_basis: str = "fetched"
    requests: RequestLog | None = None
    keys: KeyCheck | None = None
    cpu_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Suite:
    """Everything measured for one total."""

    dataset: dict[str, Any]
    variants: list[Variant]
    project: dict[str, Any]
    components: dict[str, float]
    problems: list[str]
    scheduler: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    in_flight: int = 1

    def variant(self, prefix: str) -> Variant | None:
        return next((v for v in self.variants if v.name.startswith(prefix)), None)

    def chunk_rate(self) -> float | None:
        """The chunk tasks of the ``dags test`` run alone: their records fetched over their own elapsed time, without
        plan, the hand-overs and commit around them (None when a chunk did not report its elapsed time)."""
        spans = [s for s in self.project.get("timeline", {}).get("spans", []) if s.get("task") == "crawl_chunk"]
        if not spans or any(s.get("elapsed_s") is None for s in spans):
            return None
        return sum(s["fetched"] for s in spans) / sum(s["elapsed_s"] for s in spans)

    def limit(self) -> tuple[float, str]:
        """The crawl's limit at this latency, measured: the slowest of the source with the project's pages in
        flight, the source drain (at 0 ms, the source's own bound) and the sink; and which one it is."""
        bounds = [(v.rate, v.name) for v in self.variants if v.name.startswith(LIMIT_VARIANTS)]
        return min(bounds) if bounds else (math.nan, "-")


# The variants whose rate bounds the crawl (a reused 0 ms figure keeps its name with a note).
LIMIT_VARIANTS = ("source drain", "sink limit", "source, ")


def crawl_span_variant(project: Variant, name: str = "project: crawl span (PG)") -> Variant:
    """The project's crawl alone: plan start to commit end, as recorded in crawler_ops.crawl_run."""
    crawl_s = float(project.details["crawl_s"])
    return Variant(
        name=name,
        wall_s=crawl_s,
        pages=project.pages,
        fetched=project.fetched,
        kept=project.kept,
        published=project.published,
        rate=project.fetched / crawl_s if crawl_s > 0 else math.nan,
    )
