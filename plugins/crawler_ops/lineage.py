"""Names of a crawl's datasets in lineage: the source data set it reads and the Kafka topic it writes.

OpenLineage names a dataset by a namespace and a name (its naming spec, ``spec/naming``): a Kafka topic is
namespace ``kafka://{bootstrap server host}:{port}``, name the topic. The spec has no entry for HTTP APIs; a source is
named the way the spec names other servers reached by URL: namespace ``{scheme}://{host}:{port}`` of the source
connection's base URL (the port always written, 80 or 443 when the URL has none), name the path of the task's pages.

The topic's Airflow Asset (``kafka://<host>/<topic>``, the Kafka provider's URI scheme) becomes the OpenLineage dataset
namespace ``kafka://<host>``, name ``<topic>``; with the bootstrap server as host the two name one dataset.

Pure functions, except :func:`env_bootstrap_servers`, which reads a connection from the process environment only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

KAFKA_DEFAULT_PORT = 9092
_LISTENER_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]*://")
HTTP_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class DatasetName:
    """A dataset's identity in OpenLineage: ``namespace`` (where) and ``name`` (what, unique in the namespace)."""

    namespace: str
    name: str


def _host_port(host: str, port: int) -> str:
    # An IPv6 address keeps its brackets, or its colons would read as the port.
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def kafka_server(bootstrap_servers: str) -> str:
    """``host:port`` of the first server of a librdkafka ``bootstrap.servers`` list (``PLAINTEXT://h:9092,h2``);
    a server given without a port uses Kafka's 9092, as librdkafka does."""
    first = bootstrap_servers.split(",")[0].strip()
    if not first:
        raise ValueError(f"no server in bootstrap.servers {bootstrap_servers!r}")
    # A listener prefix such as SASL_SSL:// is not a URL scheme urlsplit accepts (it has an underscore): drop it.
    address = _LISTENER_PREFIX.sub("", first)
    parts = urlsplit(f"kafka://{address}")
    if not parts.hostname:
        raise ValueError(f"no host in bootstrap server {first!r}")
    return _host_port(parts.hostname, parts.port or KAFKA_DEFAULT_PORT)


def kafka_dataset(bootstrap_servers: str, topic: str) -> DatasetName:
    """The topic as OpenLineage names it: namespace ``kafka://host:port`` of the first bootstrap server."""
    return DatasetName(f"kafka://{kafka_server(bootstrap_servers)}", topic)


def asset_dataset(asset_uri: str) -> DatasetName:
    """The OpenLineage dataset of a ``kafka://<host>/<topic>`` Asset URI, split as the Kafka provider splits it."""
    parts = urlsplit(asset_uri)
    if parts.scheme != "kafka" or not parts.netloc or not parts.path.strip("/"):
        raise ValueError(f"not a kafka://<host>/<topic> Asset URI: {asset_uri!r}")
    return DatasetName(f"kafka://{parts.netloc}", parts.path.lstrip("/"))


def http_dataset(base_url: str, path: str) -> DatasetName:
    """The source data set read at ``path`` below ``base_url``: namespace ``scheme://host:port``, name the full
    path (a path in the base URL included, as the HTTP client joins them); no credentials, no query."""
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    if scheme not in HTTP_DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) base URL: {base_url!r}")
    port = parts.port or HTTP_DEFAULT_PORTS[scheme]
    name = f"{parts.path.rstrip('/')}/{path.lstrip('/')}"
    return DatasetName(f"{scheme}://{_host_port(parts.hostname, port)}", name)


def env_bootstrap_servers(conn_id: str, environ: dict[str, str] | None = None) -> str | None:
    """``bootstrap.servers`` of the Kafka connection ``conn_id`` when the environment defines it
    (``AIRFLOW_CONN_<ID>``, JSON or URI form, as Airflow's environment-variables secrets backend reads it); None
    when it is not there (it may live in the metadata DB or a secrets backend, which DAG parsing must not query)
    or names no servers."""
    value = (os.environ if environ is None else environ).get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if not value:
        return None
    servers = _json_extra(value) if value.lstrip().startswith("{") else _uri_extra(value, conn_id)
    return str(servers) if servers else None


def _json_extra(value: str) -> object:
    extra = json.loads(value).get("extra") or {}
    return (json.loads(extra) if isinstance(extra, str) else extra).get("bootstrap.servers")


def _uri_extra(value: str, conn_id: str) -> object:
    from airflow.sdk import Connection  # only for the URI form, whose extra Airflow's own parser decodes

    return Connection.from_uri(value, conn_id=conn_id).extra_dejson.get("bootstrap.servers")
