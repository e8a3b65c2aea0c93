"""Where the time of an ``airflow dags test`` run goes, from Airflow's own log lines: interpreter start, DAG
load, and per task instance Airflow's set-up, the user code and Airflow's post-execute."""

from __future__ import annotations

import itertools
import math
import re
from datetime import datetime
from typing import Any

LOG_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+)Z")
TI_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
TI_END = re.compile(r"\[DAG TEST\] end task task_id=(\S+) map_index=(-?\d+)")

# Markers of one task instance's life in ``dags test`` output, in order: the DAG test loop picks it up,
# the in-process Execution API marks it running, pre-execute ends (user code starts), the user code returns,
# the loop sees it finished.
MARKERS = (
    ("running", "Task started"),
    ("code", "::endgroup::"),
    ("returned", "Done. Returned value was"),
)


def log_epoch(line: str) -> float | None:
    """The UTC timestamp at the start of a log line as epoch seconds."""
    match = LOG_TS.match(line)
    return datetime.fromisoformat(match.group(1) + "+00:00").timestamp() if match else None


def parse_timeline(text: str, started: float, ended: float) -> dict[str, Any]:
    """Split the ``dags test`` run into phases: interpreter start, DAG load, and per task instance the
    Airflow set-up (picked up -> user code starts), the user code (the crawl step), Airflow's post-execute
    (XCom push, state update); plus the process teardown."""
    spans, first_log = task_spans(text)
    for span in spans:
        span_phases(span)
    gaps = [b["start"] - a.get("end", a["start"]) for a, b in itertools.pairwise(spans)]
    return {
        "interpreter_start_s": (first_log - started) if first_log else math.nan,
        "startup_s": (spans[0]["start"] - started) if spans else math.nan,
        "teardown_s": (ended - spans[-1].get("end", ended)) if spans else math.nan,
        "between_tasks_s": sum(gaps),
        "spans": [
            {"start_epoch": s["start"], "end_epoch": s.get("end", ended)}
            | {k: v for k, v in s.items() if k not in ("start", "end", *dict(MARKERS))}
            for s in spans
        ],
    }


def task_spans(text: str) -> tuple[list[dict[str, Any]], float | None]:
    """One span per task instance with the moments of its markers, and the first log line's moment."""
    spans: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    first_log: float | None = None
    for line in text.splitlines():
        moment = log_epoch(line)
        if moment is None:
            continue
        first_log = first_log if first_log is not None else moment
        if match := TI_START.search(line):
            current = {"task": match.group(1), "map_index": int(match.group(2)), "start": moment}
            spans.append(current)
        elif current is None:
            continue
        elif TI_END.search(line):
            current["end"] = moment
            current = None
        else:
            mark_phase(current, line, moment)
    return spans, first_log


def mark_phase(span: dict[str, Any], line: str, moment: float) -> None:
    """Record the first occurrence of each marker, in order."""
    for name, needle in MARKERS:
        if name in span:
            continue
        if needle in line:
            span[name] = moment
        return


def span_phases(span: dict[str, Any]) -> None:
    """Seconds of set-up, user code and post-execute of one task instance (missing markers count as 0)."""
    end = span.get("end", span["start"])
    code = span.get("code", span.get("running", span["start"]))
    returned = span.get("returned", end)
    span["setup_s"] = code - span["start"]
    span["user_code_s"] = returned - code
    span["post_s"] = end - returned
