"""Run one crawl chunk in its own process that stops itself (SIGSTOP) at a chosen point, so a test can let its claims
lapse, let another attempt take its batches, and resume it (SIGCONT) afterwards.

Usage: python tests/integration/pause_runner.py '<json: the chunk_runner spec, plus params, backfill, pause>'

``pause`` ({"point": "at_fetch" | "before_commit" | "at_commit", "nth": N}) stops the process at its N-th page fetch,
after the batch was claimed and before its page is requested; or at its N-th batch with messages, once they reached
the broker (in the batch's open transaction, under exactly-once) and before Kafka confirms (commits) them; or, under
exactly-once, at its N-th transaction's commit, after the check that the batch is still claimed. ``params`` are the
run's trigger params (a replay range), ``backfill`` the ``[start, end)`` data interval of a backfill run; ``kill`` is
chunk_runner's.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import crawl_chunk
from crawler_ops.planning import ChunkPlan
from tests.integration.chunk_runner import arm


class TransactionGate:
    """Lets the process stop between PostgreSQL transactions only. SIGSTOP freezes every thread: one caught inside
    a transaction (the checkpoint thread renewing the next batch's lease) would hold its row locks for as long as the
    process is stopped, and the attempt the test lets take the batches over would wait on them for good."""

    def __init__(self) -> None:
        self.state = threading.Condition()
        self.open = 0
        self.stopping = False

    def install(self) -> None:
        from crawler_ops.hooks.store.db import CrawlerDbHook

        transaction = CrawlerDbHook.transaction
        gate = self

        @contextmanager
        def gated(hook: CrawlerDbHook, lock: bool = False) -> Iterator[Any]:
            with gate.state:
                gate.state.wait_for(lambda: not gate.stopping)
                gate.open += 1
            try:
                with transaction(hook, lock) as cur:
                    yield cur
            finally:
                with gate.state:
                    gate.open -= 1
                    gate.state.notify_all()

        CrawlerDbHook.transaction = gated  # type: ignore[method-assign, assignment]

    def stop(self) -> None:
        """Stop the whole process, once no thread is inside a transaction, until a SIGCONT from the test."""
        with self.state:
            self.stopping = True
            self.state.wait_for(lambda: self.open == 0)
        # Raised in this thread (tgkill), not sent to the process: a process-directed SIGSTOP is taken by whichever
        # thread the kernel picks, and until that one runs, this thread would carry on (commit its transaction).
        signal.raise_signal(signal.SIGSTOP)
        with self.state:
            self.stopping = False
            self.state.notify_all()


GATE = TransactionGate()
stop_here = GATE.stop


def arm_pause(point: str, nth: int) -> None:
    from crawler_ops.hooks.kafka.exactly_once import TransactionalPublisher
    from crawler_ops.hooks.kafka.producer import KafkaPublisher
    from crawler_ops.hooks.source.hook import SourceApiHook

    seen = {"events": 0}
    lock = threading.Lock()

    def reached() -> bool:
        with lock:
            seen["events"] += 1
            return seen["events"] == nth

    if point == "at_fetch":
        get_page = SourceApiHook.get_page

        def get_page_after_pause(self: SourceApiHook, offset: int, limit: int) -> Any:
            if reached():
                stop_here()
            return get_page(self, offset, limit)

        SourceApiHook.get_page = get_page_after_pause  # type: ignore[method-assign]
        return

    if point == "at_commit":
        check_held = TransactionalPublisher.check_held

        def check_held_then_pause(self: TransactionalPublisher) -> None:
            check_held(self)
            if reached():
                stop_here()

        TransactionalPublisher.check_held = check_held_then_pause  # type: ignore[method-assign]
        return

    def wrap(confirm: Any) -> Any:
        def confirm_after_pause(self: KafkaPublisher) -> int:
            if self._expected and reached():
                self.producer.flush(30)  # the batch reached the broker (in its open transaction, if any)
                stop_here()
            return int(confirm(self))

        return confirm_after_pause

    for cls in (KafkaPublisher, TransactionalPublisher):
        cls.confirm = wrap(cls.confirm)  # type: ignore[method-assign]


def main(spec: dict[str, Any]) -> None:
    if spec.get("kill"):
        arm(spec["kill"]["point"], spec["kill"]["nth"])
    if spec.get("pause"):
        GATE.install()
        arm_pause(spec["pause"]["point"], spec["pause"]["nth"])
    cfg = CrawlTaskConfig.model_validate(spec["config"])
    backfill = spec.get("backfill")
    run = RunContext(
        cfg=cfg,
        run_id=spec["run_id"],
        ref=datetime.fromisoformat(spec["ref"]),
        params=RunParams.from_params(spec.get("params") or {}, cfg.id),
        map_index=spec["map_index"],
        try_number=spec["try_number"],
        backfill_interval=(datetime.fromisoformat(backfill[0]), datetime.fromisoformat(backfill[1]))
        if backfill
        else None,
    )
    print(json.dumps(crawl_chunk(run, ChunkPlan.from_xcom(spec["payload"]))), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
