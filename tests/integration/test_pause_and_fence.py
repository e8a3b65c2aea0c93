"""A chunk process paused (SIGSTOP), not killed, while another attempt takes its batches, then resumed (SIGCONT).

A paused task process is what a long GC pause, a frozen VM or a lost heartbeat looks like: Airflow, or another run,
carries on without it, and it wakes up later believing it still owns its batches. When it resumes it must publish
nothing for the batches taken over: under ``at_least_once`` the claim check before producing stops it; under
``exactly_once`` the new attempt's ``init_transactions`` fenced its producer, so the transaction it had open aborts.
Each chunk runs in its own process (``pause_runner.py``), which stops itself at the chosen point; the test resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from crawler_ops.planning import ChunkPlan
from tests.support import REPO, chunk_spec, make_task, query, read_topic, watermark

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REF = datetime(2026, 11, 1, tzinfo=UTC)
TOTAL = 1_000
LEASE_S = 10
TOLERANCE_S = 24 * 3600


class Paused:
    """A chunk process started by ``pause_runner.py``; its stderr goes to a file (a pipe could fill up and block it)."""

    def __init__(self, spec: dict[str, Any], log: Path) -> None:
        self.log = log
        with log.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "integration" / "pause_runner.py"), json.dumps(spec)],
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])},
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def wait_stopped(self, timeout: float = 120.0) -> None:
        """Wait until the process stopped itself at its pause point."""
        deadline = time.monotonic() + timeout
        while self.state() != "T":
            assert self.process.poll() is None, (
                f"the chunk ended (exit {self.process.returncode}) before its pause:\n{self.stderr()}"
            )
            assert time.monotonic() < deadline, f"the chunk did not reach its pause within {timeout}s:\n{self.stderr()}"
            time.sleep(0.05)

    def state(self) -> str:
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0]

    def resume(self, timeout: float = 120.0) -> int:
        """SIGCONT; its exit code once it ended."""
        self.process.send_signal(signal.SIGCONT)
        return self.process.wait(timeout)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def spawn_paused(
    tmp_path: Path, cfg: CrawlTaskConfig, run_id: str, chunk: ChunkPlan, pause: dict[str, Any], try_number: int = 1
) -> Paused:
    spec = chunk_spec(cfg, run_id, REF, chunk, try_number, pause=pause)
    return Paused(spec, tmp_path / f"{run_id}-{try_number}.stderr")


def claims_of(pg_uri: str, task_id: str, run_id: str) -> list[int]:
    """The batches a run holds claims on."""
    sql = (
        "SELECT id FROM crawler_ops.batch_status WHERE task_name = %s AND status = 1 AND claim_token LIKE %s "
        "ORDER BY id"
    )
    return [int(row[0]) for row in query(pg_uri, sql, task_id, f"{run_id}|%")]


def wait_until_lapsed(pg_uri: str, task_id: str, run_id: str, timeout: float = 120.0) -> list[int]:
    """Wait until every claim of ``run_id`` is older than the lease, so another run may take it; returns them."""
    held = claims_of(pg_uri, task_id, run_id)
    assert held, f"run {run_id} holds no claim at its pause"
    sql = (
        "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 1 AND claim_token LIKE %s "
        "AND start_time >= now() - make_interval(secs => %s)"
    )
    deadline = time.monotonic() + timeout
    while int(query(pg_uri, sql, task_id, f"{run_id}|%", LEASE_S)[0][0]):
        assert time.monotonic() < deadline, f"the claims of {run_id} did not lapse within {timeout}s"
        time.sleep(0.2)
    return held


def open_rows(pg_uri: str, task_id: str) -> list[tuple[int, int]]:
    """The task's batch rows not done: (start offset, status)."""
    sql = "SELECT id, status FROM crawler_ops.batch_status WHERE task_name = %s AND status <> 2 ORDER BY id"
    return [(int(lo), int(status)) for lo, status in query(pg_uri, sql, task_id)]


def crawl_everything(run: RunContext) -> str:
    """Plan, crawl and commit ``run`` in this process; returns its status."""
    chunks = plan_run(run)
    results = [crawl_chunk(replace(run, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    return commit_run(run, chunks, results).status


def setup(source: Any, unique_id: str, delivery: str) -> tuple[CrawlTaskConfig, RunContext, ChunkPlan]:
    source.create(unique_id, total=TOTAL, ref=REF, in_window_share=1.0)
    cfg = make_task(
        unique_id, max_chunks=1, claim_lease_s=LEASE_S, source={"concurrency": 2}, kafka={"delivery": delivery}
    )
    run = RunContext(cfg=cfg, run_id="paused-run", ref=REF, params=RunParams())
    [chunk] = plan_run(run)
    return cfg, run, chunk


def by_key(messages: list[Any]) -> Counter[str]:
    return Counter(m.key for m in messages)


def test_a_chunk_resumed_after_another_run_took_its_lapsed_claims_publishes_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, tmp_path
):
    cfg, run, chunk = setup(source, unique_id, "at_least_once")
    paused = spawn_paused(tmp_path, cfg, run.run_id, chunk, {"point": "at_fetch", "nth": 1})
    try:
        paused.wait_stopped()
        taken = wait_until_lapsed(pg_uri, unique_id, run.run_id)
        # Another run of the task plans the same batches and takes the lapsed claims.
        assert crawl_everything(replace(run, run_id="taking-run")) == "success"
        assert watermark(pg_uri, unique_id) == TOTAL

        exit_code = paused.resume()
    finally:
        paused.kill()

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    from_paused = sorted(
        {int(m.headers["source_offset"]) // 100 * 100 for m in messages if m.headers["run_id"] == run.run_id}
    )
    assert from_paused == [], f"the resumed chunk published batches {from_paused} (it had claimed {taken})"
    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"])
    seen = by_key(messages)
    assert set(seen) == truth and max(seen.values()) == 1, "each record once"
    assert exit_code != 0, "the resumed chunk went on as if it still held its batches"
    assert "no longer claimed by this worker" in paused.stderr(), paused.stderr()
    assert open_rows(pg_uri, unique_id) == [], "the resumed chunk's failure gave back batches another run finished"
    assert watermark(pg_uri, unique_id) == TOTAL


@pytest.mark.parametrize(
    ("taker", "point", "nth", "stopped_by"),
    [
        # At its first batch the other run plans the paused chunk's batches: the same transactional id.
        ("another run", "before_commit", 1, "no longer claimed by this worker"),
        # Later the other run's plan leaves out the batches done above: another transactional id, so only the
        # claim check before the commit stops the paused producer.
        ("another run", "before_commit", 3, "no longer claimed by this worker"),
        # Paused after that check: Airflow gave the task instance up for dead, and its next try, with the same
        # claims and transactional id, fences the paused producer in Kafka.
        ("the retry", "at_commit", 3, "fenced"),
    ],
    ids=["another-run-same-plan", "another-run-other-plan", "retry-after-the-claim-check"],
)
def test_a_chunk_paused_inside_its_kafka_transaction_is_stopped_and_each_record_is_committed_once(
    source, kafka_bootstrap, pg_uri, unique_id, tmp_path, taker, point, nth, stopped_by
):
    cfg, run, chunk = setup(source, unique_id, "exactly_once")
    paused = spawn_paused(tmp_path, cfg, run.run_id, chunk, {"point": point, "nth": nth})
    try:
        paused.wait_stopped()
        in_transaction = TOTAL - 100 * nth  # the batch whose transaction is open: the nth newest
        if taker == "another run":
            wait_until_lapsed(pg_uri, unique_id, run.run_id)
            assert crawl_everything(replace(run, run_id="taking-run")) == "success"
        else:
            # Airflow gave the task instance up for dead: its next try takes the same claims and transactional id.
            result = crawl_chunk(replace(run, try_number=2, map_index=0), chunk)
            assert commit_run(run, [chunk], [result]).status == "success"

        exit_code = paused.resume()
    finally:
        paused.kill()

    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"])
    committed = by_key(read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert set(committed) == truth, "missing or unexpected records"
    assert max(committed.values()) == 1, f"duplicated under read_committed: {sum(n - 1 for n in committed.values())}"
    uncommitted = read_topic(kafka_bootstrap, cfg.kafka.topic, isolation="read_uncommitted")
    seen = by_key(uncommitted)
    twice = {int(m.headers["source_offset"]) // 100 * 100 for m in uncommitted if seen[m.key] > 1}
    assert twice == {in_transaction}, "the paused chunk had produced its batch into the transaction that aborted"
    assert exit_code != 0, "the resumed chunk committed its transaction"
    assert stopped_by in paused.stderr().lower(), paused.stderr()
    assert open_rows(pg_uri, unique_id) == [] and watermark(pg_uri, unique_id) == TOTAL
