"""The four steps of a crawl DAG as operators: plan -> crawl_chunk (mapped) -> commit -> announce.

Each step owns its failure policy: which errors fail its task without retries (:mod:`.failures`) and what it records
when it fails. :func:`crawler_ops.factory.crawl.build_crawl_dag` wires them for every configured task; a hand-written
DAG wires them the same way::

    with DAG("crawl_jobs_by_hand", params=RunParams.airflow_params(), max_active_runs=1, schedule=None):
        plan = PlanCrawlOperator(crawl=cfg)
        chunks = CrawlChunkOperator.over(plan, crawl=cfg)
        commit = CommitCrawlOperator(crawl=cfg)
        plan >> chunks >> commit >> AnnounceCrawlOperator(crawl=cfg)
        plan >> commit  # commit runs (ALL_DONE) also when plan planned nothing or failed

The steps hand over through XCom: plan returns the chunks' :class:`~crawler_ops.planning.ChunkPlan` in their XCom
form, each ``crawl_chunk`` instance returns its :class:`~crawler_ops.results.ChunkResult` as a dict, and commit returns
the :class:`~crawler_ops.results.RunSummary` as a dict, which announce attaches to the Asset event.

Each step imports its module (and through it the source, Kafka and PostgreSQL clients) when it runs, not when the DAG
file is parsed: parsing stays cheap, and a task process loads only what its own step needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseOperator, SkipMixin, TriggerRule
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, pulled_results
from crawler_ops.operators.failures import crawler_cause, keep_error_on_run, no_retry_for_permanent_errors
from crawler_ops.operators.lineage import CrawlLineage, ReportsLineage
from crawler_ops.planning import ChunkPlan
from crawler_ops.results import ChunkResume
from crawler_ops.telemetry.notify import notify_run

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from crawler_ops.crawl.chunk import ChunkDeferred

log = logging.getLogger(__name__)

#: A deferred chunk resumes no sooner than this: the scheduler must first take in the executor's report that the
#: deferring process ended, or it fails the resumed try as "changed externally" (apache/airflow#72716).
MIN_DEFERRAL_S = 15.0

# The task ids of a crawl DAG, named here only: the steps find each other's XComs by them.
PLAN = "plan"
CRAWL_CHUNK = "crawl_chunk"
COMMIT = "commit"
ANNOUNCE = "announce"


class CrawlStepOperator(BaseOperator):
    """A step of a crawl run of one crawl task.

    :param crawl: the crawl task (its entry of the YAML config, or one built in code).
    """

    def __init__(self, *, crawl: CrawlTaskConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crawl = crawl

    def run_of(self, context: Context) -> RunContext:
        """The crawl run of this task instance; invalid params fail the task without retries."""
        return RunContext.from_airflow(self.crawl, context)  # type: ignore[arg-type]


class PlanCrawlOperator(CrawlStepOperator, SkipMixin):
    """Count, read the watermark and status rows, plan batches newest first, group them into chunks; returns the
    chunks' :class:`ChunkPlan` in XCom form.

    A plan that finds nothing to crawl ends the run in its own process: it commits as the commit task would (the
    run history records the poll, the watermark stays), then skips the tasks after it, so a poll that found nothing
    costs one task process. When that commit fails, or with ``ends_idle_runs=False``, it returns an empty list
    instead: the chunks are skipped and the commit task commits and reports as usual.

    Failure policy: a config error or a non-retriable source error (a 4xx, a total that jumped, too many batches)
    fails without retries; every failure is kept in the run history (status 'failed', the error) when PostgreSQL
    is reachable. Takes one slot of the source connection's pool, unless given a pool.
    """

    def __init__(
        self, *, crawl: CrawlTaskConfig, task_id: str = PLAN, ends_idle_runs: bool = True, **kwargs: Any
    ) -> None:
        pool, slots = crawl.source.pool_slots
        kwargs.setdefault("pool", pool)
        kwargs.setdefault("pool_slots", slots)
        super().__init__(crawl=crawl, task_id=task_id, **kwargs)
        self.ends_idle_runs = ends_idle_runs

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from crawler_ops.crawl.plan import record_plan_failure
        from crawler_ops.crawl.steps import plan_run

        run = self.run_of(context)
        try:
            chunks = no_retry_for_permanent_errors(lambda: plan_run(run))
        except Exception as exc:
            record_plan_failure(run, crawler_cause(exc))
            raise
        if not chunks and self.ends_idle_runs:
            self.end_idle_run(run, context)
        return [chunk.to_xcom() for chunk in chunks]

    def end_idle_run(self, run: RunContext, context: Context) -> None:
        """Commit a run that planned nothing here and skip the steps after the plan (raises Airflow's signal to skip
        them); returns when the commit failed, for the commit task to report it."""
        from crawler_ops.crawl.steps import commit_run

        summary = commit_run(run, [], [])
        if summary.failed:
            log.warning("task %s: planned nothing, but the commit failed; the commit task reports it", run.cfg.id)
            return
        log.info("crawl summary (nothing to crawl; the run ends at its plan): %s", summary.to_dict())
        notify_run(self.crawl.notify, self.crawl.id, "success", summary.to_dict())
        self.skip(context["ti"], self.get_direct_relatives(upstream=False))


class CrawlChunkOperator(ReportsLineage, CrawlStepOperator):
    """Crawl one planned chunk: fetch, filter, publish, mark its batches done; returns the chunk's result. Mapped
    over the plan's chunks (:meth:`over`), one instance per chunk, labelled by its offsets in the UI.

    A chunk whose request must wait longer than ``source.defer_after_s`` (a Retry-After, a paused rate limit) defers
    after its last finished batch: its worker and pool slots are free while
    :class:`~crawler_ops.triggers.source_open.SourceOpenTrigger` waits in the triggerer, and :meth:`resume` goes on
    at the batch it stopped at.

    Failure policy: a config error or a non-retriable source error fails without retries; a batch that fails is
    released with its error on the run (:mod:`crawler_ops.crawl.ledger`), so the next try or run takes it again.

    :param chunk: the chunk, in the XCom form the plan step returns.
    """

    def __init__(
        self, *, crawl: CrawlTaskConfig, chunk: Mapping[str, Any], task_id: str = CRAWL_CHUNK, **kwargs: Any
    ) -> None:
        super().__init__(crawl=crawl, task_id=task_id, **kwargs)
        self.chunk = chunk

    @classmethod
    def over(cls, plan: BaseOperator, *, crawl: CrawlTaskConfig, **kwargs: Any) -> MappedOperator:
        """One instance per chunk ``plan`` returns, at most ``max_parallel_chunks`` at once per run, in the task's
        chunk pool (``kwargs`` override any of that)."""
        pool, slots = crawl.chunk_pool
        settings: dict[str, Any] = {
            "task_id": CRAWL_CHUNK,
            "map_index_template": "{{ chunk_label | default('chunk') }}",
            "max_active_tis_per_dagrun": crawl.max_parallel_chunks,
            "pool": pool,
            "pool_slots": slots,
        }
        return cls.partial(crawl=crawl, **(settings | kwargs)).expand(chunk=plan.output)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.crawl_from(context, ChunkResume())

    def resume(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """The chunk's next leg, once its source is open again (the trigger's ``event`` says where the last one
        stopped)."""
        start = ChunkResume.from_kwargs(event["resume"])
        log.info(
            "task %s: source %s is open again (%.3gs after the wait it asked for); resuming at batch %d of the chunk",
            self.crawl.id,
            event.get("source"),
            event.get("late_s") or 0.0,
            start.index,
        )
        return self.crawl_from(context, start)

    def crawl_from(self, context: Context, start: ChunkResume) -> dict[str, Any]:
        from crawler_ops.crawl.chunk import ChunkDeferred
        from crawler_ops.crawl.steps import crawl_chunk

        chunk = ChunkPlan.from_xcom(self.chunk)
        # map_index_template renders from the task's context after it ran: label the instance by offsets.
        context["chunk_label"] = chunk.label  # type: ignore[typeddict-unknown-key]
        run = self.run_of(context)
        self.lineage = CrawlLineage(self.crawl, publishes=not run.params.dry_run)
        resume = start if self.crawl.source.defer_after_s is not None else None
        try:
            return no_retry_for_permanent_errors(lambda: crawl_chunk(run, chunk, resume))
        except ChunkDeferred as deferred:
            self.defer_until_open(deferred)
        except Exception as exc:
            keep_error_on_run(run, f"crawl_chunk {chunk.label}", exc)
            raise

    def defer_until_open(self, deferred: ChunkDeferred) -> NoReturn:
        """Hand the worker slot back until the source is open (Airflow's signal to defer)."""
        from crawler_ops.triggers.source_open import SourceOpenTrigger

        source = self.crawl.source
        assert source.defer_after_s is not None
        trigger = SourceOpenTrigger(
            source.model_dump(mode="json"),
            self.crawl.postgres_conn_id,
            not_before=time.time() + max(deferred.wait_s, MIN_DEFERRAL_S),
            within_s=source.defer_after_s / 2,
            max_wait_s=source.max_retry_after_s + source.deadline_s,
            resume=deferred.resume.to_kwargs(),
        )
        self.defer(trigger=trigger, method_name="resume")


class CommitCrawlOperator(CrawlStepOperator):
    """Move the watermark up to the oldest batch not done, tidy the status table, store and return the run summary,
    send the webhook (the Asset event: :class:`AnnounceCrawlOperator`). Runs whatever the chunks did (``ALL_DONE``).

    Failure policy: a run with batches left undone, or whose plan failed, fails this task without retries
    (retrying the commit cannot finish batches), after one failure webhook; a crash of the commit itself closes
    the run record and notifies only on its last try.

    :param plan_task_id: the task whose XCom holds the plan.
    :param chunk_task_id: the mapped task whose XComs hold the chunks' results.
    """

    def __init__(
        self,
        *,
        crawl: CrawlTaskConfig,
        task_id: str = COMMIT,
        plan_task_id: str = PLAN,
        chunk_task_id: str = CRAWL_CHUNK,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", TriggerRule.ALL_DONE)
        super().__init__(crawl=crawl, task_id=task_id, **kwargs)
        self.plan_task_id = plan_task_id
        self.chunk_task_id = chunk_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from crawler_ops.crawl.commit import close_abandoned_run, failed_plan_summary, notify_commit_crash
        from crawler_ops.crawl.steps import commit_run

        cfg, ti = self.crawl, context["ti"]
        planned = ti.xcom_pull(task_ids=self.plan_task_id)
        try:
            run = self.run_of(context)
        except AirflowFailException as exc:
            notify_run(
                cfg.notify, cfg.id, "failure", {"task": cfg.id, "run_id": context["run_id"], "errors": [str(exc)]}
            )
            raise
        if planned is None:
            # A plan that failed after opening the run record, and could not close it, left it 'running'.
            try:
                if not run.params.dry_run:
                    close_abandoned_run(cfg, run.run_id, "plan: the plan task did not finish; see its log")
            except Exception:  # the run fails below either way
                log.exception("task %s: could not close the run record of the failed plan", cfg.id)
            summary = failed_plan_summary(run)
            notify_run(cfg.notify, cfg.id, "failure", summary.to_dict())
            # Fail, not skip: a skipped leaf would mark the whole run successful.
            raise AirflowFailException(
                f"task {cfg.id}: plan did not finish ({'; '.join(summary.errors)}); nothing committed, watermark "
                "unchanged"
            )
        chunks = [ChunkPlan.from_xcom(chunk) for chunk in planned]
        try:
            summary = commit_run(run, chunks, pulled_results(ti, self.chunk_task_id) if chunks else [])
        except Exception as exc:
            if isinstance(exc, AirflowFailException) or getattr(ti, "try_number", 1) > getattr(ti, "max_tries", 0):
                notify_commit_crash(cfg, run.run_id, exc)
            raise
        log.info("crawl summary: %s", summary.to_dict())
        if summary.failed:
            notify_run(cfg.notify, cfg.id, "failure", summary.to_dict())
            raise AirflowFailException(
                f"task {cfg.id}: {len(summary.unfinished)} planned batches not done (oldest "
                f"{summary.to_dict()['oldest_unfinished']}); errors: {list(summary.errors)}. "
                f"The watermark stays at {summary.new_watermark}; the next run retries them."
            )
        notify_run(cfg.notify, cfg.id, "success", summary.to_dict())
        return summary.to_dict()


class AnnounceCrawlOperator(CrawlStepOperator):
    """Emit the topic's Asset event, with the run summary as its extra, when the run published new records;
    skipped otherwise, so downstream DAGs run on new data only.

    The Asset is a static outlet (the dag-processor registers it at parse time). Emitting through an AssetAlias from
    commit instead failed when backfill runs committed at once: their first emissions raced to link alias and asset.

    :param summary_task_id: the task whose XCom holds the run summary.
    """

    def __init__(
        self, *, crawl: CrawlTaskConfig, task_id: str = ANNOUNCE, summary_task_id: str = COMMIT, **kwargs: Any
    ) -> None:
        super().__init__(crawl=crawl, task_id=task_id, outlets=[crawl.kafka.asset], **kwargs)
        self.summary_task_id = summary_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        summary = context["ti"].xcom_pull(task_ids=self.summary_task_id)
        if not summary or not summary.get("published"):
            raise AirflowSkipException(f"task {self.crawl.id}: no new records published; no Asset event")
        context["outlet_events"][self.crawl.kafka.asset].extra = summary
        return {"asset": self.crawl.kafka.asset_uri, "published": summary["published"]}
