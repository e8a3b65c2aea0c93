"""A chaos run's rows, its targets, and the table: per scenario and delivery mode, the runs, what was injected,
expected / received / missing / duplicated records as a ``read_uncommitted`` and a ``read_committed`` consumer
see them, and how the runs ended.

Targets: nothing missing for either consumer; no unexpected record; under ``exactly_once`` no duplicate for a
``read_committed`` consumer; under ``at_least_once`` at most one duplicated batch per kill (per failed chunk try
when the scenario kills no chunk)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawlbench.chaos.count import ISOLATIONS, Tally, tallies_json

RU, RC = ISOLATIONS


@dataclass
class Row:
    """One scenario in one delivery mode, as measured."""

    scenario: str
    mode: str = ""
    runs: int = 0
    injected: str = ""
    expected: int = 0
    tallies: dict[str, Tally] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)
    failed_attempts: int = 0
    kills: int = 0
    skipped: str | None = None
    error: str | None = None

    @classmethod
    def skipped_row(cls, scenario: str, why: str) -> Row:
        return cls(scenario, skipped=why)

    @classmethod
    def failed_row(cls, scenario: str, error: str) -> Row:
        return cls(scenario, error=error)

    def outcome(self) -> str:
        if self.skipped or self.error:
            return self.skipped or f"ERROR: {str(self.error).splitlines()[0]}"
        counts = Counter(self.states)
        runs = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        return f"{runs}; {self.failed_attempts} failed chunk tries"

    def misses(self) -> list[str]:
        """The targets this row missed."""
        if self.skipped:
            return []
        if self.error:
            return [f"{self.scenario}: did not complete: {self.error}"]
        where = f"{self.scenario} {self.mode}"
        misses = [f"{where}: {t.missing} missing ({level})" for level, t in self.tallies.items() if t.missing]
        misses += [f"{where}: {t.unexpected} unexpected ({level})" for level, t in self.tallies.items() if t.unexpected]
        committed = self.tallies[RC]
        if self.mode == "exactly_once" and committed.duplicated:
            misses.append(f"{where}: {committed.duplicated} records duplicated for a read_committed consumer")
        allowed = self.kills or self.failed_attempts
        if self.mode == "at_least_once" and committed.dup_batches > allowed:
            misses.append(f"{where}: {committed.dup_batches} batches duplicated, more than {allowed} interruptions")
        return misses

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "mode": self.mode,
            "runs": self.runs,
            "injected": self.injected,
            "kills": self.kills,
            "expected": self.expected,
            "consumers": tallies_json(self.tallies),
            "run_states": self.states,
            "failed_chunk_tries": self.failed_attempts,
            "outcome": self.outcome(),
            "skipped": self.skipped,
            "error": self.error,
            "misses": self.misses(),
        }


HEADER = (
    "| scenario | mode | runs | kills / faults injected | expected | received (ru / rc) | missing (ru / rc) "
    "| duplicated (ru / rc) | dup batches (rc) | run outcome | target |\n"
    "|---|---|---:|---|---:|---:|---:|---:|---:|---|---|"
)


def pair(row: Row, name: str) -> str:
    return " / ".join(f"{getattr(row.tallies[level], name):,}" for level in ISOLATIONS)


def table_line(row: Row) -> str:
    if not row.tallies:
        return f"| {row.scenario} | | | | | | | | | {row.outcome()} | {'missed' if row.misses() else '-'} |"
    cells = [
        row.scenario,
        row.mode,
        str(row.runs),
        row.injected,
        f"{row.expected:,}",
        pair(row, "received"),
        pair(row, "missing"),
        pair(row, "duplicated"),
        f"{row.tallies[RC].dup_batches:,}",
        row.outcome(),
        "MISSED" if row.misses() else "met",
    ]
    return "| " + " | ".join(cells) + " |"


def render(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(table_line(r) for r in rows)])


def write_json(path: Path, rows: Sequence[Row], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "rows": [r.as_json() for r in rows]}, indent=2, default=str))
