"""Run one crawl chunk in its own process, as an Airflow task process would, so a test can SIGKILL it.

Usage: python tests/integration/chunk_runner.py '<json: config, run_id, ref, map_index, try_number, payload[, kill]>'

``kill`` ({"point": "before_commit" | "after_commit", "nth": N}) makes the process SIGKILL itself at the N-th
batch with messages: once its messages reached the broker but before Kafka confirms (commits) it, or after
Kafka did and before PostgreSQL marks it done. ``{"point": "token_saved"}``: once it wrote an OAuth2 token the
provider just issued into the source's token row, before that transaction commits. ``{"point": "feed_page_done",
"nth": N}``: once the transaction that records the N-th page of a feed done has committed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime
from typing import Any

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import crawl_chunk
from crawler_ops.hooks.kafka.producer import KafkaPublisher
from crawler_ops.planning import ChunkPlan


def arm(point: str, nth: int) -> None:
    """Wrap the publishers' confirm (the transactional one inherits it through ``KafkaPublisher``'s subclass)."""
    from crawler_ops.hooks.kafka.exactly_once import TransactionalPublisher

    seen = {"batches": 0}

    def wrap(confirm: Any) -> Any:
        def confirm_then_maybe_die(self: KafkaPublisher) -> int:
            if self._expected:
                seen["batches"] += 1
            dying = seen["batches"] == nth and self._expected
            if dying and point == "before_commit":
                self.producer.flush(30)  # the batch reached the broker (in its open transaction, if any)
                os.kill(os.getpid(), signal.SIGKILL)
            published = confirm(self)
            if dying and point == "after_commit":
                os.kill(os.getpid(), signal.SIGKILL)
            return published

        return confirm_then_maybe_die

    for cls in (KafkaPublisher, TransactionalPublisher):
        cls.confirm = wrap(cls.confirm)  # type: ignore[method-assign]


def arm_token_saved() -> None:
    """Die once the provider's answer is written into the token row, before the transaction commits."""
    from crawler_ops.hooks.source.tokens import SourceTokenStore

    save = SourceTokenStore.save

    def save_then_die(self: SourceTokenStore, *args: Any) -> None:
        save(self, *args)
        os.kill(os.getpid(), signal.SIGKILL)

    SourceTokenStore.save = save_then_die  # type: ignore[method-assign]


def arm_feed_page_done(nth: int) -> None:
    """Die once the transaction that records the ``nth`` feed page done has committed."""
    from crawler_ops.crawl.feed import FeedLedger

    finish, seen = FeedLedger.finish, {"pages": 0}

    def finish_then_die(self: FeedLedger, *args: Any) -> tuple[int, bool]:
        result = finish(self, *args)
        seen["pages"] += 1
        if seen["pages"] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    FeedLedger.finish = finish_then_die  # type: ignore[method-assign]


def main(spec: dict[str, Any]) -> None:
    if (spec.get("kill") or {}).get("point") == "token_saved":
        arm_token_saved()
    elif (spec.get("kill") or {}).get("point") == "feed_page_done":
        arm_feed_page_done(spec["kill"]["nth"])
    elif spec.get("kill"):
        arm(spec["kill"]["point"], spec["kill"]["nth"])
    run = RunContext(
        cfg=CrawlTaskConfig.model_validate(spec["config"]),
        run_id=spec["run_id"],
        ref=datetime.fromisoformat(spec["ref"]),
        params=RunParams(),
        map_index=spec["map_index"],
        try_number=spec["try_number"],
    )
    print(json.dumps(crawl_chunk(run, ChunkPlan.from_xcom(spec["payload"]))), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
