"""The chaos scenarios and how one runs: fresh data sets for its flights (one per delivery mode, crawled at the
same time), its private services up, runs triggered on the private Airflow while its fault is injected, then
the topics counted against the source's ground truth."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from crawlbench.chaos.faults import (
    ChunkKiller,
    airflow_restart,
    broker_outage,
    cluster_broker_loss,
    postgres_outage,
    round_quota,
    source_errors,
    source_faults,
)
from crawlbench.chaos.flights import Flight, count_flight, create_data
from crawlbench.chaos.lab import Lab
from crawlbench.chaos.report import Row

# Rounds a kill scenario may add when its runs ended before all kills were made.
EXTRA_ROUNDS = 3
Inject = Callable[[Lab, Sequence[Flight], int], str]


@dataclass(frozen=True)
class Scenario:
    """One failure, injected while runs of both delivery modes go on.

    :param name: the command-line name.
    :param kafka: ``stack`` (the shared broker, untouched), ``single`` or ``cluster`` (private, broken on purpose).
    :param pg: ``stack`` or ``private`` (a private server, broken on purpose).
    :param rounds: runs per flight (records are appended before each later run).
    :param inject: breaks something during round ``n``; says what.
    :param source_errors: the source answers 10 % of requests with 503 from the start.
    :param scale: records of the data sets, in multiples of the shape's, for a fault that takes long to land.
    :param skipped: why the scenario cannot run here.
    :param kills: the fault is chunk kills (the row shows each flight's count).
    """

    name: str
    inject: Inject
    kafka: str = "stack"
    pg: str = "stack"
    rounds: int = 1
    source_errors: bool = False
    scale: int = 1
    skipped: str | None = None
    kills: bool = False


def inject_kills(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    rounds_left = lab.settings.kill_rounds - round_no
    quota = {f.task_id: round_quota(lab.settings.kills, f.kills, rounds_left) for f in flights}
    ChunkKiller(lab, flights).run(quota)
    return "SIGKILLs of chunk task processes"


def inject_broker(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    return broker_outage(lab, flights, lab.kafka["single"], lab.settings.broker_down_s)


def inject_cluster(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    return cluster_broker_loss(lab, flights, lab.kafka["cluster"])


def inject_postgres(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    assert lab.pg is not None  # a scenario with pg="private" makes it
    return postgres_outage(lab, flights, lab.pg, lab.settings.pg_down_s)


def inject_source(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    return source_faults(lab, flights)


def inject_restart(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    return airflow_restart(lab, flights, lab.settings.restart_down_s)


def no_injection(lab: Lab, flights: Sequence[Flight], round_no: int) -> str:
    return ""


def scenarios(kill_rounds: int) -> dict[str, Scenario]:
    """Every scenario, in the order a full run takes them (the one restarting Airflow last)."""
    listed = [
        Scenario("chunk_kills", inject_kills, rounds=kill_rounds, kills=True),
        Scenario("broker_outage", inject_broker, kafka="single"),
        Scenario("cluster_broker", inject_cluster, kafka="cluster"),
        Scenario("postgres_outage", inject_postgres, pg="private"),
        Scenario("source_faults", inject_source, source_errors=True),
        # Stopping the api-server and the scheduler takes 5-25 s: enough work left for the stop to land mid-chunk.
        Scenario("airflow_restart", inject_restart, scale=3),
        Scenario("celery_worker", no_injection, skipped="skipped: no Celery stack"),
    ]
    return {s.name: s for s in listed}


def plan_flights(lab: Lab, scenario: Scenario, tag: str) -> list[Flight]:
    """The scenario's crawl tasks, one per delivery mode (none for a skipped scenario)."""
    if scenario.skipped:
        return []
    short = {"at_least_once": "alo", "exactly_once": "eos"}
    return [
        lab.flight(f"chaos_{tag}_{scenario.name}_{short[mode]}", mode, scenario.kafka, scenario.pg)
        for mode in lab.settings.modes
    ]


@contextmanager
def private_services(lab: Lab, scenario: Scenario) -> Iterator[None]:
    """The private Kafka or PostgreSQL the scenario breaks: started before it, stopped after it."""
    cluster = lab.kafka.get(scenario.kafka)
    pg = lab.pg if scenario.pg == "private" else None
    try:
        if cluster is not None:
            lab.say(f"  starting a private Kafka of {len(cluster.nodes)} node(s) on {cluster.bootstrap}")
            cluster.up()
        if pg is not None:
            lab.say(f"  starting a private PostgreSQL on port {pg.port}")
            pg.start()
        yield
    finally:
        if cluster is not None:
            cluster.down()
        if pg is not None:
            pg.stop()


def run_scenario(lab: Lab, scenario: Scenario, flights: Sequence[Flight]) -> list[Row]:
    """Run the scenario's rounds with its fault injected, then count each flight's topic."""
    if scenario.skipped:
        return [Row.skipped_row(scenario.name, scenario.skipped)]
    with private_services(lab, scenario):
        shape = lab.settings.shape
        for flight in flights:
            errors = source_errors() if scenario.source_errors else {}
            create_data(lab.admin, flight, replace(shape, total=shape.total * scenario.scale), **errors)
            lab.admin.clear_requests(flight.task_id)
        injected, round_no = "", 0
        while round_no < scenario.rounds or (scenario.kills and owed_kills(lab, flights, round_no)):
            if round_no:
                for flight in flights:
                    lab.admin.append(flight.task_id, shape.append)
            lab.say(f"  round {round_no + 1}: triggering {', '.join(f.dag_id for f in flights)}")
            lab.trigger(flights)
            injected = scenario.inject(lab, flights, round_no) or injected
            lab.wait_runs(flights)
            round_no += 1
        return [row_for(lab, scenario, flight, injected) for flight in flights]


def owed_kills(lab: Lab, flights: Sequence[Flight], round_no: int) -> bool:
    """Another round for kills not made yet (the runs ended first), within the extra rounds allowed."""
    return round_no < lab.settings.kill_rounds + EXTRA_ROUNDS and any(f.kills < lab.settings.kills for f in flights)


def row_for(lab: Lab, scenario: Scenario, flight: Flight, injected: str) -> Row:
    expected, tallies = count_flight(lab.admin, flight)
    return Row(
        scenario=scenario.name,
        mode=flight.mode,
        runs=len(flight.runs),
        injected=f"{flight.kills} SIGKILLs" if scenario.kills else (flight.injected or injected),
        expected=expected,
        tallies=tallies,
        states=list(flight.states),
        failed_attempts=lab.api().failed_chunk_attempts(flight.dag_id),
        kills=flight.kills,
    )
