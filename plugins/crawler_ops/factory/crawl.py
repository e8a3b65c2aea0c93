"""The DAG ``crawl_<id>`` of each crawl task: plan -> mapped crawl_chunk -> commit -> announce."""

from __future__ import annotations

from airflow.sdk import DAG, get_parsing_context
from airflow.sdk.definitions.param import ParamsDict

from crawler_ops.config import CrawlTaskConfig, LoadedConfig, broken_dag_id, load_config
from crawler_ops.crawl.run import RunParams
from crawler_ops.factory.common import TAGS, build_dags, dag_settings, schedule_for
from crawler_ops.factory.shards import file_shard, in_shard, shard_of
from crawler_ops.operators.crawl import (
    ANNOUNCE,
    COMMIT,
    CRAWL_CHUNK,
    PLAN,
    AnnounceCrawlOperator,
    CommitCrawlOperator,
    CrawlChunkOperator,
    PlanCrawlOperator,
)


def doc_for(cfg: CrawlTaskConfig) -> str:
    return (
        f"### {cfg.name or cfg.id}\n\n"
        f"Crawls source data set `{cfg.source_task}` (connection `{cfg.source.conn_id}`) newest first into Kafka "
        f"topic `{cfg.kafka.topic}` (connection `{cfg.kafka.conn_id}`); progress in PostgreSQL connection "
        f"`{cfg.postgres_conn_id}`. Keeps records whose `{'` / `'.join(cfg.filter.date_fields)}` lies within "
        f"{cfg.filter.days:g} days of the run's data-interval end.\n\n"
        f"**{PLAN}** counts and plans batches of {cfg.batch_size} records from the watermark up; **{CRAWL_CHUNK}** "
        "(mapped, labelled by offsets) fetches, filters, publishes and marks batches done; "
        f"**{COMMIT}** moves the watermark and stores the run summary; **{ANNOUNCE}** emits the Asset "
        f"`{cfg.kafka.asset_uri}` when new records were published.\n\n"
        "Params: " + ", ".join(f"`{name}`" for name in RunParams.names()) + "."
    )


def build_crawl_dag(cfg: CrawlTaskConfig) -> DAG:
    """The DAG ``crawl_<id>`` for one crawl task: the steps of :mod:`crawler_ops.operators.crawl`, wired."""
    with DAG(
        dag_id=cfg.dag_id,
        description=f"Crawl {cfg.name or cfg.id} into Kafka topic {cfg.kafka.topic}",
        tags=[*TAGS, *cfg.tags],
        doc_md=doc_for(cfg),
        schedule=schedule_for(cfg),
        **dag_settings(cfg),
    ) as dag:
        # plan and crawl_chunk call the source: each takes one slot of the source connection's pool, which bounds the
        # steps of a source running at once; their requests in flight are bounded by permits in PostgreSQL.
        plan = PlanCrawlOperator(crawl=cfg)
        chunks = CrawlChunkOperator.over(plan, crawl=cfg)
        commit = CommitCrawlOperator(crawl=cfg)
        plan >> chunks >> commit >> AnnounceCrawlOperator(crawl=cfg)
        plan >> commit
    # Given once the steps exist, so they carry none of their own: a task made in a DAG with Params holds a deep copy
    # of them, which Airflow's serializer resolves (a JSON-schema check per Param) several times per task, four times
    # the DAG's own cost. A run's params are the DAG's merged with its conf either way.
    dag.params = ParamsDict(RunParams.airflow_params())
    return dag


def build_crawl_dags(loaded: LoadedConfig | None = None, shard_file: str | None = None) -> dict[str, DAG]:
    """The crawl DAGs ``crawl_<id>`` of the config: all of them, or those of the shard a DAG file named
    ``crawl_dags_<i>_of_<n>.py`` stands for (:mod:`.shards`)."""
    if shard_file is None:
        loaded = loaded or load_config(check_imports=True)
        return build_dags(loaded.tasks, loaded.errors, build_crawl_dag, "crawl_")
    index, count = file_shard(shard_file)
    # A shard file validates its own tasks only: validating every task of a large config in each file cost more
    # than building the shard's DAGs. A task process (Airflow names the DAG it runs) validates its own task alone.
    wanted = get_parsing_context().dag_id

    def keep(label: str) -> bool:
        return shard_of(label, count) == index and (wanted is None or broken_dag_id(label, "crawl_") == wanted)

    loaded = loaded or load_config(check_imports=True, keep_task=keep)
    tasks = tuple(in_shard({t.id: t for t in loaded.tasks}, index, count).values())
    return build_dags(tasks, in_shard(loaded.errors, index, count), build_crawl_dag, "crawl_")
