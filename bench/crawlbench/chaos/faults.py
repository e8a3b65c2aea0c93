"""The faults a chaos scenario injects while its runs go on: SIGKILLs of chunk task processes, a Kafka broker or
PostgreSQL killed and restarted, source errors and 429 bursts, the Airflow api-server and scheduler restarted.
Each returns what it injected, in words for the table."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg

from crawlbench.chaos.flights import Flight, run_progress, wait_until
from crawlbench.chaos.lab import Lab
from crawlbench.chaos.on_airflow import ChunkAttempt
from crawlbench.chaos.targets import PrivatePostgres, wait_leaders
from crawlbench.common import BenchError

if TYPE_CHECKING:
    from kafka_cluster import KafkaCluster

# A chunk try is killed at a random moment within this many seconds after it finished its first batch, so every
# try makes progress and a run ends whatever the number of kills.
KILL_WITHIN_S = 2.0
MID_RUN_SHARE = 0.25
POLL_S = 0.2
BURST_EVERY_S = 10.0
BURST_S = 3.0
SOURCE_ERROR_RATE = 0.1


def batches_done_by(flight: Flight, attempt: ChunkAttempt) -> int:
    """Batches this try of the chunk marked done (its claim tokens start with run id, map index and try)."""
    with psycopg.connect(flight.pg_uri, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 2 "
            "AND left(claim_token, length(%s)) = %s",
            (flight.task_id, attempt.token_prefix, attempt.token_prefix),
        ).fetchone()
    return int(row[0]) if row else 0


def round_quota(total: int, done: int, rounds_left: int) -> int:
    """Kills still owed, spread over the rounds left (all of them in the last)."""
    return max(0, math.ceil((total - done) / max(rounds_left, 1)))


class ChunkKiller:
    """SIGKILLs running ``crawl_chunk`` task processes of the flights, each try at a random moment after it
    finished a batch, up to a number of kills per flight.

    :param lab: the chaos run.
    :param flights: the flights whose chunks may be killed.
    """

    def __init__(self, lab: Lab, flights: Sequence[Flight]) -> None:
        self.lab, self.flights = lab, list(flights)
        self.by_dag = {f.dag_id: f for f in flights}
        self.target = {f.task_id: f.kills for f in flights}
        self.due: dict[tuple[str, int], float] = {}  # when each try is to die; inf once killed

    def owed(self, flight: Flight) -> bool:
        return flight.kills < self.target[flight.task_id] and not self.lab.finished(flight)

    def run(self, quota: dict[str, int], cap_s: float = 900.0) -> None:
        """Kill until each flight had ``quota[task_id]`` more kills, or its run ended."""
        for flight in self.flights:
            self.target[flight.task_id] = flight.kills + quota[flight.task_id]
        deadline = self.lab.left(cap_s)
        while any(self.owed(f) for f in self.flights):
            if time.monotonic() > deadline:
                raise BenchError(f"chunk kills: {quota} not reached within {cap_s:.0f}s")
            self.lab.tick(self.flights)
            for attempt in self.lab.api().running_chunks(list(self.by_dag)):
                self.step(self.by_dag[attempt.dag_id], attempt)
            time.sleep(POLL_S)

    def step(self, flight: Flight, attempt: ChunkAttempt) -> None:
        key = (attempt.ti_id, attempt.try_number)
        if flight.kills >= self.target[flight.task_id] or self.due.get(key) == math.inf:
            return
        if key not in self.due:
            if batches_done_by(flight, attempt) >= 1:
                self.due[key] = time.monotonic() + self.lab.rng.uniform(0, KILL_WITHIN_S)
            return
        if time.monotonic() >= self.due[key] and (proc := self.lab.api().task_process(attempt)) is not None:
            proc.send_signal(signal.SIGKILL)
            flight.kills += 1
            self.due[key] = math.inf
            where = f"{flight.dag_id} chunk {attempt.map_index} try {attempt.try_number}"
            self.lab.say(f"  SIGKILL {where} (pid {proc.pid})")


def wait_mid_run(lab: Lab, flights: Sequence[Flight], share: float = MID_RUN_SHARE) -> None:
    """Until every flight's run fetched ``share`` of its planned batches. A run that ended first would make the
    fault hit nothing: that is an error (give the scenario more records)."""

    def ready() -> bool:
        lab.tick(flights)
        return all(lab.finished(f) or run_progress(f) >= share for f in flights)

    wait_until("the runs to get under way", ready, lab.left(600), POLL_S)
    if ended := [f.dag_id for f in flights if lab.finished(f)]:
        raise BenchError(f"{', '.join(ended)}: the run ended before the fault; use more records (--total)")


def hold(lab: Lab, flights: Sequence[Flight], seconds: float) -> None:
    """Let ``seconds`` pass, watching the flights' batches."""
    until = time.monotonic() + seconds

    def over() -> bool:
        lab.tick(flights)
        return time.monotonic() >= until

    wait_until(f"{seconds:.0f}s to pass", over, lab.left(seconds + 60), 1.0)


def broker_outage(lab: Lab, flights: Sequence[Flight], cluster: KafkaCluster, down_s: float) -> str:
    """The only broker SIGKILLed mid-run, restarted ``down_s`` later."""
    wait_mid_run(lab, flights)
    cluster.kill(1)
    lab.say(f"  broker SIGKILLed; restarting it in {down_s:.0f}s")
    hold(lab, flights, down_s)
    cluster.up()
    return f"broker SIGKILLed, down {down_s:.0f}s"


def cluster_broker_loss(lab: Lab, flights: Sequence[Flight], cluster: KafkaCluster) -> str:
    """The broker leading partition 0 of the first flight's topic SIGKILLed mid-run, back after the runs."""
    wait_mid_run(lab, flights)
    victim = wait_leaders(cluster, flights[0].topic)[0]
    cluster.kill(victim)
    lab.say(f"  broker {victim} of {len(cluster.nodes)} SIGKILLed")
    lab.wait_runs(flights)
    cluster.up()
    return f"broker {victim} of {len(cluster.nodes)} SIGKILLed"


def postgres_outage(lab: Lab, flights: Sequence[Flight], pg: PrivatePostgres, down_s: float) -> str:
    """The crawler database's server SIGKILLed mid-run (postmaster and backends), started again ``down_s`` later."""
    wait_mid_run(lab, flights)
    pg.kill()
    lab.say(f"  PostgreSQL SIGKILLed; restarting it in {down_s:.0f}s")
    hold(lab, flights, down_s)
    pg.start()
    return f"PostgreSQL SIGKILLed, down {down_s:.0f}s"


def source_faults(lab: Lab, flights: Sequence[Flight]) -> str:
    """With 10 % of the source's answers 503 (set with the data sets), every ``BURST_EVERY_S`` a ``BURST_S`` burst
    of 429 (Retry-After 1 s) on every list request, until the runs end; each flight's list requests answered 5xx
    and 429, from the source's request log."""
    latency, bursts = lab.settings.shape.latency_ms, 0
    while not all(lab.finished(f) for f in flights):
        hold(lab, flights, BURST_EVERY_S)
        for flight in flights:
            lab.admin.set_faults(flight.task_id, latency_ms=latency, **source_errors(), rate_limit_every=1)
        hold(lab, flights, BURST_S)
        for flight in flights:
            lab.admin.set_faults(flight.task_id, latency_ms=latency, **source_errors())
        bursts += 1
    for flight in flights:
        statuses = lab.admin.statuses(flight.task_id)
        errors = sum(n for code, n in statuses.items() if code >= 500)
        flight.injected = f"{errors} × 5xx, {statuses[429]} × 429 in {bursts} bursts"
    return f"{SOURCE_ERROR_RATE:.0%} 503 answers, 429 bursts"


def source_errors() -> dict[str, float | int]:
    return {"error_rate": SOURCE_ERROR_RATE, "error_status": 503}


def airflow_restart(lab: Lab, flights: Sequence[Flight], down_s: float) -> str:
    """The private Airflow's api-server and scheduler stopped mid-run (SIGTERM) and started again."""
    wait_mid_run(lab, flights)
    lab.api().restart(("api-server", "scheduler"), down_s)
    return f"api-server + scheduler restarted ({down_s:.0f}s down)"
