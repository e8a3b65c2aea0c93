"""A short run of ``bench/chaos.py`` (the whole chaos run is a benchmark, kept out of the suite): one chunk task
process SIGKILLed and one Kafka broker restarted mid-run, through a private Airflow scheduler, in both delivery
modes. What the topics hold is counted by the chaos script against the source's ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ("chunk_kills", "broker_outage")
MODES = ("at_least_once", "exactly_once")


@pytest.fixture(scope="module")
def chaos_report(stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("chaos") / "chaos.json"
    command = [
        sys.executable,
        str(REPO / "bench" / "chaos.py"),
        *("--scenarios", ",".join(SCENARIOS)),
        *("--kills", "1", "--kill-rounds", "1", "--broker-down-s", "10", "--total", "4000"),
        *("--max-minutes", "8", "--json", str(out)),
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"chaos.py wrote no report (exit {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(out.read_text())
    report["returncode"], report["stderr"] = result.returncode, result.stderr
    return report


def rows_by_case(report: dict) -> dict[tuple[str, str], dict]:
    return {(row["scenario"], row["mode"]): row for row in report["rows"]}


def test_every_scenario_ran_in_both_modes_with_its_fault(chaos_report):
    rows = rows_by_case(chaos_report)
    assert set(rows) == {(s, m) for s in SCENARIOS for m in MODES}, [r.get("error") for r in chaos_report["rows"]]
    for mode in MODES:
        assert rows[("chunk_kills", mode)]["kills"] == 1
        assert rows[("broker_outage", mode)]["injected"].startswith("broker SIGKILLed")


def test_no_record_is_missing_for_either_consumer_after_a_kill_and_a_broker_restart(chaos_report):
    for case, row in rows_by_case(chaos_report).items():
        for isolation, seen in row["consumers"].items():
            assert seen["missing"] == 0 and seen["unexpected"] == 0, (case, isolation, seen)
        assert row["expected"] > 0 and set(row["run_states"]) == {"success"}, (case, row["outcome"])


def test_exactly_once_shows_no_duplicate_to_a_read_committed_consumer(chaos_report):
    for scenario in SCENARIOS:
        assert rows_by_case(chaos_report)[(scenario, "exactly_once")]["consumers"]["read_committed"]["duplicated"] == 0


def test_the_chaos_script_reports_every_target_met(chaos_report):
    assert chaos_report["returncode"] == 0, chaos_report["stderr"][-3000:]
