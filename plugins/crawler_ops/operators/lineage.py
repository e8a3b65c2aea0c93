"""OpenLineage for the crawl steps: ``crawl_chunk`` reads the source data set and writes the Kafka topic.

The OpenLineage provider turns an operator's ``get_openlineage_facets_on_complete`` into the datasets of the task's
events. The provider's other routes do not fit: it translates Airflow Assets (inlets, outlets, hook lineage) only for
URI schemes with a registered converter, Kafka's but not HTTP's, and static inlets are fixed when the DAG is parsed,
before any connection may be read. So the step's operator has that method (:class:`ReportsLineage`); the running step
says what it reads and writes (:func:`report_lineage`), and the method names the datasets from the connections when
the provider asks for them, after the step: a deployment without an OpenLineage transport never asks, so it pays
nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler_ops.lineage import DatasetName, asset_dataset, http_dataset, kafka_dataset

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

    from crawler_ops.config import CrawlTaskConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrawlLineage:
    """What a run of a crawl step reads and writes.

    :param cfg: the crawl task.
    :param publishes: whether the step writes to the topic (not in a dry run).
    """

    cfg: CrawlTaskConfig
    publishes: bool

    def source(self) -> DatasetName:
        """The source data set: the connection's base URL and the path of its page requests."""
        from crawler_ops.hooks.http import base_url
        from crawler_ops.hooks.source.hook import SourceApiHook

        cfg = self.cfg
        hook = SourceApiHook(cfg.source, cfg.id, cfg.source_task)
        return http_dataset(base_url(hook.get_connection(cfg.source.conn_id)), hook.url_for(cfg.source.request_path))

    def topic(self) -> DatasetName:
        """The topic, named by the Kafka connection's first bootstrap server."""
        from crawler_ops.hooks.kafka.producer import IdempotentProducerHook

        servers = IdempotentProducerHook(self.cfg.kafka.conn_id).client_config()["bootstrap.servers"]
        return kafka_dataset(str(servers), self.cfg.kafka.topic)

    def datasets(self) -> tuple[list[DatasetName], list[DatasetName]]:
        """Inputs and outputs; warns when the topic's Asset URI names another dataset than the connection."""
        if not self.publishes:
            return [self.source()], []
        topic = self.topic()
        asset = asset_dataset(self.cfg.kafka.asset_uri)
        if asset != topic:
            kafka = self.cfg.kafka
            why = (
                "kafka.asset_host names another server"
                if kafka.asset_host
                else f"the Kafka connection {kafka.conn_id} is not in the environment the DAG was parsed in"
            )
            log.warning(
                "task %s: the topic's Asset %s is not the dataset %s/%s that lineage records (%s); set "
                "kafka.asset_host: %s to make them one",
                self.cfg.id,
                kafka.asset_uri,
                topic.namespace,
                topic.name,
                why,
                topic.namespace.removeprefix("kafka://"),
            )
        return [self.source()], [topic]


class ReportsLineage:
    """Mixed into an operator: tells OpenLineage the input and output datasets that its ``execute`` reported
    through :func:`report_lineage` while it ran (like an operator that keeps its job id for the same method)."""

    lineage: CrawlLineage | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """Called by the OpenLineage listener after the task ran (also after it failed)."""
        if self.lineage is None:
            return None
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset, OutputDataset

        inputs, outputs = self.lineage.datasets()
        return OperatorLineage(
            inputs=[InputDataset(namespace=d.namespace, name=d.name) for d in inputs],
            outputs=[OutputDataset(namespace=d.namespace, name=d.name) for d in outputs],
        )


def report_lineage(context: Context, lineage: CrawlLineage) -> None:
    """Record, on the running task, what it reads and writes; read back when OpenLineage asks."""
    task = context["task"]
    if isinstance(task, ReportsLineage):
        task.lineage = lineage
