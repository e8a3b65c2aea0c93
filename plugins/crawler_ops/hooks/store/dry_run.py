"""The crawl store as a dry run sees it: every read answered by the crawler database, every write dropped, so a
dry run plans what a real run would and leaves the watermark, the batch rows and the run history as they were."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from crawler_ops.hooks.store.batches import BatchRows, ParkedBatch
from crawler_ops.hooks.store.db import Cursor
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.planning import Batch


class DryRunBatchRows(BatchRows):
    """A task's batch rows, read but never written."""

    def insert(self, cur: Cursor, batches: Iterable[Batch], run_id: str, *, expired: bool = False) -> None:
        pass

    def reset(self, cur: Cursor) -> None:
        pass

    def clip(self, cur: Cursor, total: int) -> None:
        pass

    def release_finished_claims(self, cur: Cursor) -> None:
        pass

    def skip_parked(self, cur: Cursor, lo: int | None = None) -> list[ParkedBatch]:
        return []


class DryRunStoreHook(CrawlStoreHook):
    """:class:`CrawlStoreHook` whose writes of a plan are dropped (the schema is still made, so reads work)."""

    @cached_property
    def batches(self) -> BatchRows:
        return DryRunBatchRows(self.task_id)

    def reset(self, cur: Cursor) -> None:
        pass

    def start_run(self, cur: Cursor, run_id: str, mode: str, ref: datetime, **counts: Any) -> None:
        pass

    def add_run_error(self, cur: Cursor, run_id: str, error: str) -> None:
        pass

    def add_run_note(self, cur: Cursor, run_id: str, note: str) -> None:
        pass

    def record_error(
        self, cur: Cursor, run_id: str, error: str, kind: Literal["batch", "plan"], batch: Batch | None
    ) -> None:
        pass

    def finish_run(self, cur: Cursor, run_id: str, status: str, watermark: int | None, errors: Sequence[str]) -> None:
        pass
