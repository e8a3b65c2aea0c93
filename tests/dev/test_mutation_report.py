"""The verdicts of `make mutation` (dev/mutation.py): scores per module, unexplained survivors, stale explanations."""

from __future__ import annotations

import pytest

import mutation

PLANNING = "crawler_ops.planning.x_plan__mutmut_"


def test_a_survivor_without_an_explanation_fails_the_run_and_an_explained_one_does_not(capsys):
    codes = {f"{PLANNING}{n}": "killed" for n in range(1, 19)} | {
        f"{PLANNING}19": "survived",
        f"{PLANNING}20": "survived",
    }

    problems = mutation.report(codes, {f"{PLANNING}19": "equivalent"})

    assert problems == [f"{PLANNING}20: survives and is not explained in tests/MUTATION.md"]
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("crawler_ops.planning "))
    assert row.split()[1:] == ["20", "18", "2", "0", "1", "90.0%"]


def test_a_module_below_the_floor_fails_the_run():
    codes = {f"{PLANNING}{n}": "killed" for n in range(1, 9)} | {
        f"{PLANNING}9": "survived",
        f"{PLANNING}10": "no tests",
    }

    problems = mutation.report(codes, {f"{PLANNING}9": "equivalent", f"{PLANNING}10": "dead code"})

    assert problems == ["crawler_ops.planning: 80.0% of its mutants killed, below 90%"]


@pytest.mark.parametrize(
    ("verdict", "stale"), [("killed", True), ("survived", False), (None, False), ("timeout", False)]
)
def test_only_an_explanation_of_a_mutant_this_run_killed_is_called_stale(capsys, verdict, stale):
    name = "crawler_ops.message.records.x_decode__mutmut_4"
    codes = {name: verdict} if verdict else {}

    mutation.report(codes, {name: "equivalent"})

    out = capsys.readouterr().out
    assert ("no longer survives" in out) is stale
    assert ("timed out this run" in out) is (verdict == "timeout")
