"""The DAG ``crawl_<id>`` of each crawl task: plan -> mapped crawl_chunk -> commit -> announce."""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from crawler_ops.config import CrawlTaskConfig, LoadedConfig, load_config
from crawler_ops.factory.common import TAGS, build_dags, dag_settings, no_retry_for_permanent_errors, timetable_for
from crawler_ops.factory.lineage import CrawlLineage, lineage_task, report_lineage
from crawler_ops.factory.shards import file_shard, in_shard

# Each step imports its module (and through it the source, Kafka and PostgreSQL clients) when it runs, not
# when the DAG file is parsed: parsing stays cheap, and a task process loads only what its own step needs.

PARAMS = {
    "reset": Param(False, type="boolean", description="Forget the watermark and status rows; crawl from scratch."),
    "dry_run": Param(False, type="boolean", description="Fetch and filter only: publish nothing, commit nothing."),
    "max_batches": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        description="Crawl at most this many batches (the newest) in this run.",
    ),
    "filter_days": Param(
        None,
        type=["null", "number"],
        exclusiveMinimum=0,
        description="Override the task's filter window (days before the reference time).",
    ),
    "replay_from": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        description="Replay offsets [replay_from, replay_to) without touching the watermark.",
    ),
    "replay_to": Param(None, type=["null", "integer"], minimum=1, description="End (exclusive) of the replay range."),
    "skip_parked": Param(
        False,
        type="boolean",
        description="Let the watermark pass batches parked after max_attempts failures (their records are lost).",
    ),
    "confirm_total": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        description="Accept this source total although it jumped beyond total_jump_factor times the last known total.",
    ),
}


def doc_for(cfg: CrawlTaskConfig) -> str:
    return (
        f"### {cfg.name or cfg.id}\n\n"
        f"Crawls source data set `{cfg.source_task}` (connection `{cfg.source.conn_id}`) newest first into Kafka "
        f"topic `{cfg.kafka.topic}` (connection `{cfg.kafka.conn_id}`); progress in PostgreSQL connection "
        f"`{cfg.postgres_conn_id}`. Keeps records whose `{'` / `'.join(cfg.filter.date_fields)}` lies within "
        f"{cfg.filter.days:g} days of the run's data-interval end.\n\n"
        "**plan** counts and plans batches of "
        f"{cfg.batch_size} records from the watermark up; **crawl_chunk** (mapped, labelled by offsets) fetches, "
        "filters, publishes and marks batches done; **commit** moves the watermark and stores the run summary; "
        f"**announce** emits the Asset `{cfg.kafka.asset_uri}` when new records were published.\n\n"
        "Params: `reset`, `dry_run`, `max_batches`, `filter_days`, `replay_from`/`replay_to`, `skip_parked`, "
        "`confirm_total`."
    )


def build_crawl_dag(cfg: CrawlTaskConfig) -> DAG:
    """The DAG ``crawl_<id>`` for one crawl task."""
    # plan and crawl_chunk call the source: each holds as many slots of the source connection's pool as it keeps
    # requests in flight, so the pool bounds the requests in flight to the source over every worker.
    plan_pool, plan_slots = cfg.source.pool_slots
    chunk_pool, chunk_slots = cfg.chunk_pool
    with DAG(
        dag_id=cfg.dag_id,
        description=f"Crawl {cfg.name or cfg.id} into Kafka topic {cfg.kafka.topic}",
        params=dict(PARAMS),
        tags=[*TAGS, *cfg.tags],
        doc_md=doc_for(cfg),
        schedule=timetable_for(cfg),
        **dag_settings(cfg),
    ) as dag:

        @task(task_id="plan", pool=plan_pool, pool_slots=plan_slots)
        def plan(**context: Any) -> list[dict[str, Any]]:
            from crawler_ops.crawl.plan import plan_run, record_plan_failure
            from crawler_ops.crawl.run import RunContext

            run = RunContext.from_airflow(cfg, context)
            try:
                return no_retry_for_permanent_errors(lambda: plan_run(run))
            except Exception as exc:
                # The crawler's own error, not the AirflowFailException that wraps a permanent one.
                record_plan_failure(run, (exc.__cause__ or exc) if isinstance(exc, AirflowFailException) else exc)
                raise

        @lineage_task(
            task_id="crawl_chunk",
            map_index_template="{{ chunk_label | default('chunk') }}",
            max_active_tis_per_dagrun=cfg.max_parallel_chunks,
            pool=chunk_pool,
            pool_slots=chunk_slots,
        )
        def crawl_chunk(chunk: dict[str, Any], **context: Any) -> dict[str, Any]:
            # map_index_template renders from the task's context after it ran: label the instance by offsets.
            get_current_context()["chunk_label"] = chunk["label"]  # type: ignore[typeddict-unknown-key]
            from crawler_ops.crawl.chunk import crawl_chunk as crawl_one_chunk
            from crawler_ops.crawl.run import RunContext

            run = RunContext.from_airflow(cfg, context)
            report_lineage(context, CrawlLineage(cfg, publishes=not run.params.dry_run))  # type: ignore[arg-type]
            return no_retry_for_permanent_errors(lambda: crawl_one_chunk(run, chunk))

        @task(task_id="commit", trigger_rule=TriggerRule.ALL_DONE)
        def commit(**context: Any) -> dict[str, Any]:
            from crawler_ops.crawl.commit import commit_step

            return commit_step(cfg, context)

        # A static outlet (the dag-processor registers the Asset at parse time); skipped when nothing new was
        # published, so downstream DAGs run on new data only. Emitting through an AssetAlias from commit instead
        # failed when backfill runs committed at once: their first emissions raced to link alias and asset.
        @task(task_id="announce", outlets=[cfg.kafka.asset])
        def announce(summary: dict[str, Any]) -> dict[str, Any]:
            if not summary.get("published"):
                raise AirflowSkipException(f"task {cfg.id}: no new records published; no Asset event")
            get_current_context()["outlet_events"][cfg.kafka.asset].extra = summary
            return {"asset": cfg.kafka.asset_uri, "published": summary["published"]}

        planned = plan()
        crawled = crawl_chunk.expand(chunk=planned)
        committed = commit()
        planned >> crawled >> committed
        planned >> committed
        announce(committed)  # type: ignore[arg-type]
    return dag


def build_crawl_dags(loaded: LoadedConfig | None = None, shard_file: str | None = None) -> dict[str, DAG]:
    """The crawl DAGs ``crawl_<id>`` of the config: all of them, or those of the shard a DAG file named
    ``crawl_dags_<i>_of_<n>.py`` stands for (:mod:`.shards`)."""
    loaded = loaded or load_config(check_imports=True)
    tasks, errors = loaded.tasks, loaded.errors
    if shard_file is not None:
        index, count = file_shard(shard_file)
        tasks = tuple(in_shard({t.id: t for t in tasks}, index, count).values())
        errors = in_shard(errors, index, count)
    return build_dags(tasks, errors, build_crawl_dag, "crawl_")
