"""``watch:`` of a crawl task: its runs driven by the source instead of the clock."""

from __future__ import annotations

from pydantic import Field

from crawler_ops.config.sections import StrictModel


class WatchConfig(StrictModel):
    """The source watched for new records by an event trigger in Airflow's triggerer, one event loop for every task:
    every ``every_s`` it asks the source for its total (through the task's auth, shared rate limit and deadlines)
    and fires the task's watch Asset when the total is not the one its last plan found, which starts a run. A total
    announced is not announced again until a plan has seen it, or ``refire_s`` passed (an event lost with a
    triggerer that died). With a ``schedule`` the clock stays as a safety net: a run on each tick as well.
    Needs a counted source (``count_path``, a numbered paginator)."""

    every_s: float = Field(60.0, ge=5, le=86_400, description="seconds between two asks of the source's total")
    refire_s: float = Field(
        900.0,
        ge=30,
        le=604_800,
        description="seconds after which a total announced but not yet planned is announced again",
    )
