"""The fleet benchmark's targets (100 tasks on a 2-minute cadence, a fifth of them with new records at each
tick), its markdown tables (stdout) and its JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ISSUE_SCENARIO = {"tasks": 100, "cron": "*/2 * * * *", "new_share": 0.2}
LAG_P95_S = 30.0
IDLE_VS_OLD = 10.0


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    goal: str
    met: bool | None  # None: not measured


def seconds(value: float | None, bound: bool = False) -> str:
    return "–" if value is None else f"{'≥ ' if bound else ''}{value:.1f}"


def spread_text(spread: dict[str, float | None], bound: bool = False) -> str:
    return " / ".join(seconds(spread.get(k), bound) for k in ("p50", "p95", "max"))


def targets(result: dict[str, Any]) -> list[Target]:
    main, topic, cpu = result["main"], result["topic"], result["cpu"]
    lag = main["start_lag_bound_s"]["p95"]
    ratio = cpu.get("idle_vs_old_count")
    left = main["left_active"]
    return [
        Target(
            "every tick served (runs created / ticks due)",
            f"{main['runs_created']} / {main['ticks_due']} = {main['served']:.2f}"
            if main["served"] is not None
            else "–",
            "1.00",
            main["served"] is not None and main["runs_created"] >= main["ticks_due"],
        ),
        Target(
            "start lag p95 (first task start − tick)",
            f"{seconds(lag, main['never_started'] > 0)} s",
            f"≤ {LAG_P95_S:.0f} s",
            lag is not None and lag <= LAG_P95_S,
        ),
        Target("runs left queued or running after the drain", str(left), "0", left == 0),
        Target("topic = truth (every task)", topic["summary"], "exact", topic["exact"]),
        Target(
            "CPU per idle poll / the old loop's count request",
            "–" if ratio is None else f"{ratio:,.0f}×",
            f"≤ {IDLE_VS_OLD:.0f}×",
            None if ratio is None else ratio <= IDLE_VS_OLD,
        ),
    ]


def per(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def ratio_text(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}×"


def table(rows: list[tuple[str, str]], head: tuple[str, str] = ("figure", "value")) -> list[str]:
    return [f"| {head[0]} | {head[1]} |", "|---|---:|", *(f"| {a} | {b} |" for a, b in rows)]


def phase_rows(phase: dict[str, Any], pool: str) -> list[tuple[str, str]]:
    states = ", ".join(f"{s} {n}" for s, n in sorted(phase["states"].items())) or "–"
    pools = phase.get("pool", {})
    rows = [
        (f"ticks due ({phase['ticks_per_dag']} per DAG, summed)", f"{phase['ticks_due']:,}"),
        (
            "runs created for them (scheduled, run_after in the window)",
            f"{phase['runs_created']:,}"
            + (f" ({phase['served']:.2f} of the ticks)" if phase["served"] is not None else ""),
        ),
        ("their states after the drain", states),
        ("left queued or running after the drain", str(phase["left_active"])),
        ("never started", str(phase["never_started"])),
        ("start lag s, p50 / p95 / max (started runs)", spread_text(phase["start_lag_s"])),
        (
            "start lag s, p50 / p95 / max (unstarted counted as a bound)",
            spread_text(phase["start_lag_bound_s"], phase["never_started"] > 0),
        ),
        ("run duration s, p50 / p95 / max (finished runs)", spread_text(phase["duration_s"])),
        (
            "task instances per finished run, p50 / max (of them ran in a process)",
            f"{seconds(phase['tis_per_run']['p50'])} / {seconds(phase['tis_per_run']['max'])} "
            f"({seconds(phase['tis_ran_per_run']['p50'])} / {seconds(phase['tis_ran_per_run']['max'])})",
        ),
        (
            "runs whose plan found nothing new (of those with a run record)",
            f"{phase['nothing_new']:,} of {phase['with_record']:,}",
        ),
        ("crawl_chunk instances; records fetched", f"{phase['chunks']:,}; {phase['fetched']:,}"),
    ]
    if pools:
        rows.append(
            (
                f"task instances in pool `{pool}`: scheduled (waiting) median / max; running median / max",
                f"{pools['scheduled_median']} / {pools['scheduled_max']}; {pools['running_median']} / "
                f"{pools['running_max']}",
            )
        )
    if phase.get("load"):
        rows.append(
            (
                "load average (1 min), median / max",
                f"{phase['load']['load1_median']:.1f} / {phase['load']['load1_max']:.1f}",
            )
        )
    return rows


def cpu_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    cpu, old = result["cpu"], result["old_count"]
    rows = [
        ("Airflow start and DAG registration (CPU s)", f"{cpu['startup_s']:.1f}"),
        (
            "main phase: CPU s / runs ended / CPU s per run",
            f"{cpu['main_s']:.1f} / {cpu['main_runs']} / {per(cpu['main_per_run_s'])}",
        ),
    ]
    if cpu.get("idle_s") is not None:
        rows.append(
            (
                "idle phase: CPU s / runs ended (found nothing) / CPU s per idle poll",
                f"{cpu['idle_s']:.1f} / {cpu['idle_runs']} ({cpu['idle_nothing_new']}) / {per(cpu['idle_per_run_s'])}",
            )
        )
    if cpu.get("quiet_per_s") is not None:
        rows += [
            ("background: CPU s per second, schedule off and no run going", f"{cpu['quiet_per_s']:.2f}"),
            (
                "idle poll over the background: CPU s per idle poll (/ old count request)",
                f"{per(cpu['idle_marginal_per_run_s'])} ({ratio_text(cpu.get('idle_marginal_vs_old_count'))})",
            ),
        ]
    rows += [
        (
            f"old loop: one count request, CPU µs (median of {old['requests']}; wall ms)",
            f"{old['cpu_s_median'] * 1e6:.0f} ({old['wall_s_median'] * 1e3:.1f})",
        ),
        ("CPU per idle poll / old count request", ratio_text(cpu.get("idle_vs_old_count"))),
        (
            "all Airflow processes, start to stop: reaped total / sampled floor (CPU s)",
            f"{cpu['all_s']:.1f} / {cpu['sampled_floor_s']:.1f}",
        ),
    ]
    return rows


def markdown(result: dict[str, Any]) -> str:
    s = result["scenario"]
    pool = result["pool"]
    lines = [
        f"## Fleet: {s['tasks']} tasks on `{s['cron']}`, {s['executor']}"
        + (f" ({s['workers']} workers)" if s["executor"] == "celery" else ""),
        "",
        f"{s['tasks']} demo data sets of {s['records']} records (all in the window), one source connection; every "
        f"{s['append_every_s']:g} s, 5-20 new records appended to {s['new_share']:.0%} of them, for {s['minutes']:g} "
        f"min; then the schedule switched off and the runs drained (≤ {s['drain_minutes']:g} min). Registration of "
        f"the {s['tasks']} DAGs took {result['registration_s']:.0f} s; {result['appends']['count']} appends, "
        f"{result['appends']['records']:,} records. Machine: {s['cores']} cores, shared: compare ratios.",
        "",
        "### Main phase",
        "",
        *table(phase_rows(result["main"], pool)),
        "",
        f"Schedule off parsed after {result['main']['switch_off_s']:.0f} s; drain {result['main']['drain_s']:.0f} s. "
        f"Runs before the window (created at unpause for the tick before t0): {result['main']['runs_before_window']}; "
        f"after it (created before the switch-off was parsed): {result['main']['runs_after_window']}.",
    ]
    if result.get("idle") and "skipped" not in result["idle"]:
        lines += ["", f"### Idle phase ({result['idle']['minutes']:g} min, nothing appended)", ""]
        lines += table(phase_rows(result["idle"], pool))
    elif result.get("idle"):
        lines += ["", f"Idle phase skipped: {result['idle']['skipped']}"]
    lines += ["", "### CPU (every Airflow process and task process, from their own accounting)", ""]
    lines += table(cpu_rows(result))
    lines += ["", "### Topic vs truth", "", result["topic"]["summary"]]
    lines += ["", "### Targets", ""]
    if any(s[k] != v for k, v in ISSUE_SCENARIO.items()):
        lines += ["(Not the issue's scenario: the targets are for 100 tasks, `*/2 * * * *`, 20 % new per tick.)", ""]
    lines += ["| target | measured | goal | met |", "|---|---:|---:|---|"]
    for t in targets(result):
        met = "not measured" if t.met is None else ("met" if t.met else "**not met**")
        lines.append(f"| {t.name} | {t.measured} | {t.goal} | {met} |")
    return "\n".join(lines)
