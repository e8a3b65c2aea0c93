"""Where a chaos run happens: the stack's source, its Kafka and PostgreSQL (for scenarios that break nothing of
theirs), the private services the other scenarios break, the private Airflow, a seeded random source, and the
deadline every wait respects."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from crawlbench.chaos.flights import MODES, Flight, Shape, wait_until
from crawlbench.chaos.on_airflow import FINISHED, ChaosAirflow
from crawlbench.chaos.targets import PrivatePostgres, kafka_cluster, kafka_conn
from crawlbench.common import BenchError
from crawlbench.environment import Stack, devstack
from crawlbench.source import SourceAdmin

if TYPE_CHECKING:
    from kafka_cluster import KafkaCluster

# Connection ids of the private services (AIRFLOW_CONN_<ID upper-cased> in the Airflow services' environment).
PRIVATE_KAFKA = {"single": "chaos_kafka_single", "cluster": "chaos_kafka_cluster"}
PRIVATE_PG = "chaos_pg"
CLUSTER_NODES = {"single": 1, "cluster": 3}
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Settings:
    """What the scenarios inject and how hard."""

    kills: int = 20
    kill_rounds: int = 3
    broker_down_s: float = 60.0
    pg_down_s: float = 30.0
    restart_down_s: float = 5.0
    modes: tuple[str, ...] = MODES
    shape: Shape = field(default_factory=Shape)
    seed: int = 15


@dataclass
class Lab:
    """Everything a scenario works with."""

    stack: Stack
    settings: Settings
    home: Path
    deadline: float
    say: Callable[[str], None]
    rng: random.Random = field(init=False)
    admin: SourceAdmin = field(init=False)
    kafka: dict[str, KafkaCluster] = field(default_factory=dict)
    pg: PrivatePostgres | None = None
    airflow: ChaosAirflow | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.settings.seed)
        self.admin = SourceAdmin(self.stack.source_url)
        for address in (self.stack.source_url, self.stack.pg_uri, *self.stack.bootstrap.split(",")):
            host = urlsplit(address if "//" in address else f"//{address}").hostname
            if host not in LOOPBACK:
                raise BenchError(f"the chaos run only touches local services; {address} is not a loopback address")

    def need_kafka(self, kind: str) -> None:
        if kind not in self.kafka:
            self.kafka[kind] = kafka_cluster(self.home / f"kafka-{kind}", CLUSTER_NODES[kind])

    def need_pg(self) -> None:
        if self.pg is None:
            self.pg = PrivatePostgres(self.home / "pg", devstack.free_port())

    def conn_env(self) -> dict[str, str]:
        """The private services' Airflow connections, for the Airflow services' environment."""
        env = {f"AIRFLOW_CONN_{PRIVATE_KAFKA[k].upper()}": kafka_conn(c.bootstrap) for k, c in self.kafka.items()}
        if self.pg is not None:
            env[f"AIRFLOW_CONN_{PRIVATE_PG.upper()}"] = self.pg.uri
        return env

    def flight(self, task_id: str, mode: str, kafka: str = "stack", pg: str = "stack") -> Flight:
        """A flight on the stack's Kafka / PostgreSQL, or on the private ones (``single``, ``cluster``, ``private``)."""
        if kafka == "stack":
            kafka_id, bootstrap, replication = "kafka_default", self.stack.bootstrap, 1
        else:
            self.need_kafka(kafka)
            cluster = self.kafka[kafka]
            kafka_id, bootstrap, replication = PRIVATE_KAFKA[kafka], cluster.bootstrap, len(cluster.nodes)
        if pg == "stack":
            pg_id, pg_uri = "crawler_db", self.stack.pg_uri
        else:
            self.need_pg()
            pg_id, pg_uri = PRIVATE_PG, self.pg.uri
        return Flight(task_id, mode, kafka_id, bootstrap, pg_id, pg_uri, replication)

    def left(self, cap: float = math.inf) -> float:
        """Monotonic deadline for a wait of at most ``cap`` seconds that also ends with the whole run's."""
        return min(time.monotonic() + cap, self.deadline)

    def api(self) -> ChaosAirflow:
        if self.airflow is None:
            raise BenchError("the private Airflow is not running")
        return self.airflow

    def tick(self, flights: Sequence[Flight]) -> None:
        """Remember the flights' planned batches while their runs go on (commit prunes the rows)."""
        for flight in flights:
            flight.batches.poll(flight.pg_uri, flight.task_id)

    def finished(self, flight: Flight) -> bool:
        return self.api().run_state(flight.dag_id, flight.runs[-1]) in FINISHED

    def trigger(self, flights: Sequence[Flight]) -> None:
        for flight in flights:
            flight.runs.append(self.api().trigger(flight.dag_id))

    def wait_runs(self, flights: Sequence[Flight], cap_s: float = 900.0) -> None:
        """Until every flight's current run finished; then record its state."""
        deadline = self.left(cap_s)

        def done() -> bool:
            self.tick(flights)
            return all(self.finished(f) for f in flights)

        wait_until(f"the runs of {', '.join(f.dag_id for f in flights)} to finish", done, deadline, poll_s=1.0)
        for flight in flights:
            if len(flight.states) < len(flight.runs):
                flight.states.append(str(self.api().run_state(flight.dag_id, flight.runs[-1])))
