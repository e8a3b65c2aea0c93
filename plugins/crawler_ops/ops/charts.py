"""Pure: line charts of a task's run history, as coordinates an SVG template draws (no script, no library).

Each chart has one x position per run (oldest left) and one polyline per series; a run without a value for a
series (no duration, no committed watermark) leaves a gap in that series' points instead of a made-up zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WIDTH = 320
HEIGHT = 120
PAD_X = 8
PAD_TOP = 10
PAD_BOTTOM = 10


@dataclass(frozen=True)
class Point:
    """One run's value at its place in the chart; ``label`` is the tooltip (run id and value)."""

    x: float
    y: float
    value: float
    label: str


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    points: tuple[Point, ...]

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)

    @property
    def last(self) -> float | None:
        return self.points[-1].value if self.points else None


@dataclass(frozen=True)
class Chart:
    """A chart of ``runs`` runs whose values range up to ``y_max``; ``key`` names it in the page."""

    key: str
    title: str
    runs: int
    y_max: float
    series: tuple[Series, ...]
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def baseline(self) -> float:
        return float(self.height - PAD_BOTTOM)


Value = Callable[[Mapping[str, Any]], float | None]


def line_chart(
    key: str, title: str, runs: Sequence[Mapping[str, Any]], series: Sequence[tuple[str, str, Value]]
) -> Chart:
    """A chart of ``runs`` (oldest first) with one line per ``(name, color, value of a run)`` of ``series``."""
    values = [[(i, value(run)) for i, run in enumerate(runs)] for _, _, value in series]
    present = [v for line in values for _, v in line if v is not None]
    y_max = max(present, default=0.0) or 1.0
    span_x = WIDTH - 2 * PAD_X
    span_y = HEIGHT - PAD_TOP - PAD_BOTTOM

    def x_of(i: int) -> float:
        return PAD_X + (span_x * i / (len(runs) - 1) if len(runs) > 1 else span_x / 2)

    drawn = tuple(
        Series(
            name,
            color,
            tuple(
                Point(x_of(i), HEIGHT - PAD_BOTTOM - span_y * v / y_max, v, f"{runs[i]['run_id']}: {v:g} {name}")
                for i, v in line
                if v is not None
            ),
        )
        for (name, color, _), line in zip(series, values, strict=True)
    )
    return Chart(key, title, len(runs), float(y_max), drawn)


def run_charts(runs: Sequence[Mapping[str, Any]]) -> list[Chart]:
    """The status page's charts of a crawl task's finished runs: records fetched per second, records kept and
    published, and the backlog each run left."""
    if not runs:
        return []
    return [
        line_chart(
            "records_per_s", "records/s (fetched / duration)", runs, [("records/s", "#1f77b4", field("records_per_s"))]
        ),
        line_chart(
            "kept_published",
            "kept and published per run",
            runs,
            [("kept", "#2ca02c", field("kept")), ("published", "#ff7f0e", field("published"))],
        ),
        line_chart(
            "backlog", "backlog after the run (total - watermark)", runs, [("backlog", "#d62728", field("backlog"))]
        ),
    ]


def field(name: str) -> Value:
    def value(run: Mapping[str, Any]) -> float | None:
        found = run.get(name)
        return None if found is None else float(found)

    return value
