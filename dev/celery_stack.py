"""The Celery topology of the local stack, as docker-compose runs it but without Docker: Redis as the broker,
Celery's results in Airflow's metadata DB, and N workers on this machine with distinct hostnames.

Redis is Debian's ``redis-server`` (installed with apt-get when missing, as root): it is the broker the official
compose file and Helm chart use, and Debian's package is the one build the machine can install without a
download site (there is no pip-installable Redis server). Workers skip Airflow's log server (N of them would
fight over its port); the api-server reads their task logs from the shared log folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import debian

REDIS_PORT = 16379
EXECUTORS = ("local", "celery")
# A worker runs this many task instances at once; small, so the chunks of one run spread over the workers.
WORKER_CONCURRENCY = 2


class RedisMissing(RuntimeError):
    """redis-server is not installed and could not be."""


def worker_name(index: int) -> str:
    """The hostname worker ``index`` (1-based) reports in task instances."""
    return f"celery-worker-{index}"


def redis_server(log: Callable[[str], None]) -> str:
    """The ``redis-server`` binary: on PATH, else Debian's package installed with apt-get (root only)."""
    if shutil.which("redis-server") is None:
        log("redis: installing Debian's redis-server with apt-get")
    try:
        return debian.command("redis-server", "redis-server")
    except debian.PackageMissing as exc:
        raise RedisMissing(str(exc)) from exc


def redis_command(binary: str, port: int, data: Path) -> list[str]:
    """A private, memory-only Redis on 127.0.0.1:``port``."""
    data.mkdir(parents=True, exist_ok=True)
    return [
        binary,
        *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)),
        *("--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no"),
    ]


def celery_env(redis_port: int, metadata_uri: str) -> dict[str, str]:
    """What every Airflow process of a Celery stack must agree on."""
    results = metadata_uri.replace("postgresql+psycopg2://", "db+postgresql://", 1)
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": results,
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
    }


def worker_env(index: int, python_path: str | None = None) -> dict[str, str]:
    """Worker ``index``'s own settings: the hostname its task instances report (its callable is found in dev/,
    ahead of ``python_path``, default ``$PYTHONPATH``)."""
    path = python_path if python_path is not None else os.environ.get("PYTHONPATH")
    return {
        "CRAWLER_OPS_WORKER_HOSTNAME": worker_name(index),
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "worker_hostname.hostname",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), path])),
    }


def worker_command(airflow: str, index: int) -> list[str]:
    return [airflow, "celery", "worker", "--celery-hostname", f"{worker_name(index)}@%h", "--skip-serve-logs"]
