"""Measure how fast one sequential client can drain the demo source.

Examples::

    python bench/drain_source.py --start-server --total 200000 --page 1000
    python bench/drain_source.py --url http://127.0.0.1:18080 --task bench

The task is (re)created with ``PUT /admin/tasks/{task}``, then every page is
fetched in order with one keep-alive :class:`httpx.Client` and decoded.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec

from crawlbench.environment import devstack

DEV_DIR = Path(__file__).resolve().parents[1] / "dev"
STARTUP_TIMEOUT_S = 20.0

DECODERS: dict[str, Callable[[bytes], Any]] = {
    "msgspec": msgspec.json.decode,
    "json": json.loads,
}


@dataclass(frozen=True)
class DrainResult:
    """Outcome of one drain run."""

    records: int
    pages: int
    body_bytes: int
    seconds: float

    def summary(self) -> str:
        """Render the result as one human-readable line.

        :return: records/s, MB/s, pages and elapsed time.
        """
        rate = self.records / self.seconds
        mb_rate = self.body_bytes / self.seconds / 1e6
        size = self.body_bytes / max(1, self.records)
        return (
            f"records={self.records} pages={self.pages} "
            f"seconds={self.seconds:.3f} records/s={rate:,.0f} "
            f"MB/s={mb_rate:.1f} bytes/record={size:.0f}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line.

    :param argv: arguments without the program name.
    :return: the options.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:18080", help="source base URL")
    parser.add_argument("--task", default="bench", help="task id to (re)create")
    parser.add_argument("--total", type=int, default=200_000, help="records in the task")
    parser.add_argument("--page", type=int, default=1000, help="records per request")
    parser.add_argument(
        "--decoder",
        choices=sorted(DECODERS),
        default="msgspec",
        help="JSON decoder used on each page",
    )
    parser.add_argument(
        "--start-server",
        action="store_true",
        help="start `python -m demo_source` on a free port for this run",
    )
    return parser.parse_args(argv)


@contextmanager
def running_server() -> Iterator[str]:
    """Run ``python -m demo_source`` on a free port for the block's duration, with ``dev/stack.py``'s
    helpers; its output goes to a temporary folder, shown when it fails to start.

    :return: a context manager yielding the server's base URL.
    """
    port = devstack.free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "demo_source", "--host", "127.0.0.1", "--port", str(port)]
    with tempfile.TemporaryDirectory(prefix="drain_source_") as folder:
        logs = Path(folder)
        pid = devstack.spawn("source", command, env={"PYTHONPATH": str(DEV_DIR)}, logs=logs, run=logs)
        try:
            devstack.wait_until("source", pid, lambda: devstack.http_ok(f"{url}/healthz"), STARTUP_TIMEOUT_S, logs)
            yield url
        finally:
            devstack.stop_pid("source", pid, run=logs)


def put_task(client: httpx.Client, task: str, total: int) -> None:
    """(Re)create the benchmark task.

    :param client: client bound to the server.
    :param task: task id.
    :param total: number of records.
    """
    response = client.put(f"/admin/tasks/{task}", json={"total": total})
    response.raise_for_status()


def drain(client: httpx.Client, task: str, page: int, decode: Callable[[bytes], Any]) -> DrainResult:
    """Fetch every page of a task in offset order.

    :param client: keep-alive client bound to the server.
    :param task: task id.
    :param page: records per request.
    :param decode: JSON decoder applied to each body.
    :return: counts and elapsed time.
    :raises RuntimeError: on a non-200 answer.
    """
    offset = pages = body_bytes = 0
    path = f"/api/{task}/list"
    started = time.perf_counter()
    while True:
        response = client.get(path, params={"offset": offset, "limit": page})
        if response.status_code != httpx.codes.OK:
            msg = f"offset {offset}: HTTP {response.status_code}"
            raise RuntimeError(msg)
        records = decode(response.content)["data"]["data"]
        body_bytes += len(response.content)
        if not records:
            break
        pages += 1
        offset += len(records)
    return DrainResult(offset, pages, body_bytes, time.perf_counter() - started)


def run(url: str, args: argparse.Namespace) -> DrainResult:
    """Create the task and drain it against a running server.

    :param url: server base URL.
    :param args: parsed options.
    :return: the drain result.
    :raises RuntimeError: if fewer records than expected were read.
    """
    with httpx.Client(base_url=url, timeout=30.0) as client:
        put_task(client, args.task, args.total)
        result = drain(client, args.task, args.page, DECODERS[args.decoder])
    if result.records != args.total:
        msg = f"drained {result.records} records, expected {args.total}"
        raise RuntimeError(msg)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its summary.

    :param argv: arguments without the program name.
    :return: process exit code.
    """
    args = parse_args(argv)
    if args.start_server:
        with running_server() as url:
            result = run(url, args)
    else:
        result = run(args.url.rstrip("/"), args)
    sys.stdout.write(result.summary() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
