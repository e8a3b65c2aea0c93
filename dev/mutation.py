"""Mutation testing of the modules where a bug loses, duplicates or leaks data (``make mutation``).

    python dev/mutation.py                 # mutate every module of [tool.mutmut] only_mutate, then print the scores
    python dev/mutation.py --report        # print the scores of the last run again (no mutating)
    python dev/mutation.py --survivors     # the surviving mutants as diffs, to write tests or explain them

mutmut (pinned in requirements-dev.txt) copies ``plugins/crawler_ops`` into ``mutants/``, makes each small change
(a comparison flipped, a condition dropped, a constant moved) one at a time and runs the unit and DAG tests that
cover the changed function. A mutant the tests do not notice "survives". The score of a module is the share of its
mutants killed; a survivor kept on purpose gets a line in ``tests/MUTATION.md`` saying why it is equivalent or
harmless (``name: reason``); this script fails when a module scores below the floor or a survivor is unexplained.

mutmut names a mutant by its file path, assuming the package sits at the top of the repository or under ``src/``.
Ours is imported as ``crawler_ops`` from ``plugins/``, so the path-derived names are given the import name here
before mutmut runs; nothing else of mutmut changes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPLANATIONS = REPO / "tests" / "MUTATION.md"
FLOOR = 0.90
PREFIX = "plugins."
# What a mutant's verdict (mutmut's name for its test run's exit code) counts as: a timeout or a crash is noticed.
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
ALIVE = {"survived", "no tests"}


def import_names() -> None:
    """Name mutants after their module as the tests import it: ``crawler_ops.x``, not ``plugins.crawler_ops.x``."""
    import mutmut.__main__ as cli
    from mutmut.mutation import file_mutation
    from mutmut.utils import format_utils

    path_named = format_utils.get_mutant_name

    def get_mutant_name(relative_source_path: Path, mutant_method_name: str) -> str:
        name = path_named(relative_source_path, mutant_method_name)
        return name.removeprefix(PREFIX)

    for module in (format_utils, file_mutation, cli):
        module.get_mutant_name = get_mutant_name  # type: ignore[attr-defined]


def run_mutmut(arguments: list[str]) -> int:
    """``mutmut`` with ``arguments`` in this process (the forked mutant workers inherit the naming)."""
    import_names()
    from mutmut.__main__ import cli

    os.chdir(REPO)
    try:
        cli.main(args=arguments, prog_name="mutmut", standalone_mode=False)
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def module_of(mutant: str) -> str:
    """``crawler_ops.crawl.ledger`` of ``crawler_ops.crawl.ledger.xǁLedger...__mutmut_3``."""
    parts = mutant.split(".")
    for index, part in enumerate(parts):
        if part.startswith(("x_", "xǁ")):
            return ".".join(parts[:index])
    return mutant.rsplit(".", 1)[0]


def results() -> dict[str, str]:
    """Every mutant's verdict, from the ``.meta`` files mutmut leaves beside the mutated sources."""
    from mutmut.stats import status_by_exit_code

    codes: dict[str, str] = {}
    for meta in (REPO / "mutants").rglob("*.meta"):
        data = json.loads(meta.read_text())
        for name, code in data.get("exit_code_by_key", {}).items():
            if code is not None:
                codes[name.removeprefix(PREFIX)] = status_by_exit_code[code]
    return codes


def explained() -> dict[str, str]:
    """The survivors kept on purpose: ``- `mutant name`: reason`` lines of tests/MUTATION.md."""
    if not EXPLANATIONS.exists():
        return {}
    found = re.findall(r"^- `([^`]+)`: (.+)$", EXPLANATIONS.read_text(), flags=re.MULTILINE)
    return dict(found)


def configured_modules() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    return [
        p.removeprefix(PREFIX.replace(".", "/")).removesuffix(".py").replace("/", ".") for p in config["only_mutate"]
    ]


def report(codes: dict[str, str], reasons: dict[str, str]) -> list[str]:
    """Print the score per module; return what fails the run (a module below the floor, a survivor unexplained)."""
    by_module: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name, code in codes.items():
        by_module[module_of(name)].append((name, code))
    problems = []
    print(f"{'module':44} {'mutants':>7} {'killed':>7} {'survived':>8} {'no test':>7} {'explained':>9} {'score':>6}")
    totals = [0, 0, 0, 0, 0]
    for module in configured_modules():
        mutants = by_module.get(module, [])
        killed = sum(1 for _, code in mutants if code in KILLED)
        alive = [name for name, code in mutants if code in ALIVE]
        untested = sum(1 for _, code in mutants if code == "no tests")
        kept = sum(1 for name in alive if name in reasons)
        score = killed / len(mutants) if mutants else 1.0
        print(f"{module:44} {len(mutants):7} {killed:7} {len(alive) - untested:8} {untested:7} {kept:9} {score:6.1%}")
        for index, value in enumerate((len(mutants), killed, len(alive) - untested, untested, kept)):
            totals[index] += value
        if score < FLOOR:
            problems.append(f"{module}: {score:.1%} of its mutants killed, below {FLOOR:.0%}")
        problems += [
            f"{name}: survives and is not explained in tests/MUTATION.md" for name in alive if name not in reasons
        ]
    score = totals[1] / totals[0] if totals[0] else 1.0
    print(f"{'all':44} {totals[0]:7} {totals[1]:7} {totals[2]:8} {totals[3]:7} {totals[4]:9} {score:6.1%}")
    # Only mutants this run judged: an explanation of a module not run is not stale. A timeout does not make one
    # stale either: on a loaded machine an equivalent mutant's tests can outlast mutmut's limit.
    judged = {name: codes[name] for name in reasons if name in codes and codes[name] not in ALIVE}
    for name, code in sorted(judged.items()):
        if code == "timeout":
            print(f"note: tests/MUTATION.md explains {name}, which timed out this run (a loaded machine?)")
        else:
            print(f"note: tests/MUTATION.md explains {name}, which no longer survives (remove its line)")
    return problems


def survivors(codes: dict[str, str], reasons: dict[str, str]) -> int:
    """Show each unexplained survivor as mutmut's diff."""
    for name, code in sorted(codes.items()):
        if code in ALIVE and name not in reasons:
            subprocess.run([sys.executable, __file__, "--mutmut", "show", name], check=False)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="store_true", help="print the scores of the last run")
    parser.add_argument("--survivors", action="store_true", help="show the unexplained survivors as diffs")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="mutants run at once")
    parser.add_argument("--mutmut", nargs=argparse.REMAINDER, help="run a mutmut command (show, browse, ...)")
    parser.add_argument("mutants", nargs="*", help="only these mutants (names or globs), e.g. 'crawler_ops.planning*'")
    args = parser.parse_args()
    if args.mutmut:
        return run_mutmut(args.mutmut)
    if args.survivors:
        return survivors(results(), explained())
    if not args.report:
        code = run_mutmut(["run", "--max-children", str(args.max_children), *args.mutants])
        if code:
            print(f"mutmut run exited {code}")
            return code
    problems = report(results(), explained())
    for problem in problems:
        print(f"FAIL {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
