"""Demo-source pages decoded as a crawl decodes them (every record in the window), for the benches that time the
page filter in one process. The caller puts ``plugins`` and ``dev`` on ``sys.path`` first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from crawler_ops.config import SourceConfig
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.message.filtering import DateRule, Window
from crawler_ops.message.pages import head_fields
from demo_source.data import TaskConfig, make_page


@dataclass(frozen=True)
class DemoPages:
    """``count`` pages of ``size`` records, with the rule, window and headers a crawl would filter them with (key
    field ``id``)."""

    pages: list[Any]
    rule: DateRule
    window: Window
    headers: list[tuple[str, bytes]]

    @property
    def records(self) -> int:
        return sum(map(len, self.pages))

    @property
    def record_bytes(self) -> float:
        """The mean size of a record's JSON."""
        return sum(len(record) for page in self.pages for record in page) / self.records


def demo_pages(count: int, size: int) -> DemoPages:
    ref = datetime(2026, 11, 20, tzinfo=UTC)
    cfg = TaskConfig(total0=count * size * 2, seed=7, ref=ref, in_window_share=1.0, task_id="jobs")
    rule = DateRule(("aae397", "Collect_time"), "Asia/Shanghai")
    window = Window.since(ref, days=3650, now=ref, tolerance=timedelta(hours=24))
    hook = SourceApiHook(SourceConfig(), "t", "t", head_fields(rule.fields, "id"))
    encode = msgspec.json.Encoder().encode
    pages = [
        hook.read_page(encode({"data": {"data": make_page(cfg, lo, lo + size)}})) for lo in range(0, count * size, size)
    ]
    return DemoPages(pages, rule, window, [("crawl_task", b"jobs"), ("run_id", b"r")])
