"""Unit tests of crawler_ops.crawl.run: the reference time and the window a run gets from its Airflow context, and the
trigger params defined once."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import DIALECT, RunContext, RunParams
from crawler_ops.errors import ConfigError
from crawler_ops.message.filtering import Verdict

CFG = CrawlTaskConfig.model_validate({"id": "unit", "kafka": {"topic": "unit"}, "filter": {"days": 7}})
START = datetime(2026, 11, 19, tzinfo=UTC)
END = datetime(2026, 11, 20, tzinfo=UTC)


def context(run_type: str, **extra: Any) -> dict[str, Any]:
    return {
        "ti": SimpleNamespace(map_index=-1, try_number=1),
        "params": {},
        "run_id": f"{run_type}__2026-11-20",
        "dag_run": SimpleNamespace(run_type=run_type, run_after=END),
        "data_interval_start": START,
        "data_interval_end": END,
        **extra,
    }


def test_a_backfill_run_keeps_its_data_interval_half_open() -> None:
    run = RunContext.from_airflow(CFG, context("backfill"))

    window = run.window
    assert (window.start, window.end, window.half_open) == (START, END, True)
    assert window.verdict(START) is Verdict.KEEP
    assert window.verdict(END) is Verdict.EXPIRED, "a record at the end belongs to the next interval"
    assert not run.uses_status_table


@pytest.mark.parametrize("run_type", ["scheduled", "manual"], ids=["scheduled", "manual"])
def test_a_run_that_moves_the_watermark_keeps_records_newer_than_its_reference(run_type: str) -> None:
    run = RunContext.from_airflow(CFG, context(run_type, logical_date=END))

    window = run.window
    assert run.ref == END and not window.half_open
    assert window.start == END - timedelta(days=7)
    assert window.end >= datetime.now(UTC), "bounded by the wall clock plus the tolerance, not by the reference"
    assert window.verdict(END + timedelta(days=2)) is Verdict.KEEP
    assert window.verdict(datetime.now(UTC) + timedelta(days=2)) is Verdict.BAD_DATE


def test_the_run_hands_its_source_hook_the_process_limiter_of_the_source_connection() -> None:
    from crawler_ops.hooks.source import ratelimit

    run = RunContext.from_airflow(CFG, context("scheduled"))
    first, second = run.source(), run.source()
    try:
        assert first.limiter is not None
        assert first.limiter is ratelimit.limiter_for(CFG.source, CFG.postgres_conn_id), "the process's one limiter"
        assert second.limiter is first.limiter
        assert first.limiter.users == 2
    finally:
        first.close()
        second.close()
        ratelimit._limiters.clear()
    assert first.limiter.users == 0


# --------------------------------------------------------------------------- the trigger params: one definition

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "operators-guide.md"
TABLE_MARK = "<!-- generated from crawler_ops.crawl.run.RunParams; tests/unit/crawl/test_run.py checks it -->\n"


def test_the_operators_guide_shows_the_run_params_that_runparams_defines() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    assert TABLE_MARK in guide, "the generated run-parameter table lost its marker"
    written = guide.split(TABLE_MARK, 1)[1].split("\n\n", 1)[0] + "\n"

    assert written == RunParams.reference_table(), (
        f"{GUIDE.name}'s run-parameter table is stale; replace it with:\n{RunParams.reference_table()}"
    )


def test_the_dag_params_are_the_runparams_fields_with_their_defaults_and_schema() -> None:
    params = RunParams.airflow_params()

    assert tuple(params) == RunParams.names() == tuple(f.name for f in fields(RunParams))
    assert RunParams.from_params({name: param.value for name, param in params.items()}, "unit") == RunParams()
    assert params["max_batches"].schema == {"type": ["null", "integer"], "minimum": 1, **DIALECT}
    assert all(param.schema["$schema"] == "http://json-schema.org/draft-07/schema#" for param in params.values())
    assert all(param.description for param in params.values())


def test_params_given_as_null_or_missing_take_their_defaults() -> None:
    assert RunParams.from_params({"reset": None, "max_batches": 3}, "unit") == RunParams(max_batches=3)


def test_a_half_given_replay_range_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"task unit: give both replay_from and replay_to, or neither"):
        RunParams.from_params({"replay_from": 5}, "unit")
