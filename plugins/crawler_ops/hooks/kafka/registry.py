"""A Schema Registry through its Confluent-compatible REST API (Confluent Schema Registry, Apicurio Registry's
``/apis/ccompat/v6``, Karapace): the latest schema of a subject, registering a schema, the compatibility check a
subject's level makes, a schema by id. The wire format of a framed value is :mod:`crawler_ops.message.values`'.

The Airflow connection (``http``) gives the API's base URL as :func:`crawler_ops.hooks.source.hook.base_url` reads it
(a whole URL with its path may stand in ``host``) and, when it has a login, HTTP basic credentials (an API key and
secret on Confluent Cloud).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import httpx
from airflow.sdk import BaseHook

from crawler_ops.errors import RegistryError, SourceError
from crawler_ops.hooks.answers import read_bounded
from crawler_ops.hooks.http import DeadlineTransport, base_url, current_deadline, deadline, environment_proxy
from crawler_ops.message.values import framed, unframed
from crawler_ops.retry import RETRIABLE_STATUS, RetryPolicy, retry_after_seconds

__all__ = ["Registered", "SchemaRegistryHook", "framed", "schema_type_of", "subject_of", "unframed"]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SchemaType = Literal["AVRO", "JSON"]


def schema_type_of(value_format: str) -> SchemaType:
    """The registry's schema type of a value format (json_schema or avro)."""
    return "AVRO" if value_format == "avro" else "JSON"


#: A registry that did not answer, or answered 5xx / 429, is asked again: three more times within 10 s of waiting.
REGISTRY_RETRY = RetryPolicy(retries=3, backoff_s=0.5, max_backoff_s=4.0, max_retry_after_s=10.0, max_wait_s=10.0)
#: The most of a registry's answer that is read (inflated): a schema is a few KiB, a subject's list of versions less.
MAX_ANSWER_BYTES = 4 * 1024 * 1024


def subject_of(topic: str) -> str:
    """The subject a topic's value schemas are registered under (the topic-name strategy every client defaults to)."""
    return f"{topic}-value"


@dataclass(frozen=True)
class Registered:
    """One version of a subject's schema as the registry holds it."""

    subject: str
    version: int
    id: int
    schema: dict[str, Any]
    schema_type: SchemaType


class SchemaRegistryHook(BaseHook):
    """The registry behind the Airflow connection ``registry_conn_id``.

    :param timeout_s: bound of each request, from its connect to the last byte of its answer (a registry trickling
        its answer fails as a timeout then); its answer is read to :data:`MAX_ANSWER_BYTES` at most.
    """

    conn_name_attr = "registry_conn_id"
    default_conn_name = "schema_registry"
    conn_type = "http"
    hook_name = "Schema Registry (Confluent API)"

    def __init__(self, registry_conn_id: str = default_conn_name, timeout_s: float = 10.0) -> None:
        super().__init__()
        self.registry_conn_id = registry_conn_id
        self.timeout_s = timeout_s
        self._client: httpx.Client | None = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            conn = self.get_connection(self.registry_conn_id)
            auth = httpx.BasicAuth(conn.login, conn.password or "") if conn.login else None
            base = base_url(conn)
            limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
            transport = DeadlineTransport(base.lower().startswith("https://"), limits, environment_proxy(base))
            self._client = httpx.Client(
                base_url=base,
                auth=auth,
                headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
                timeout=self.timeout_s,
                transport=transport,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def latest(self, subject: str) -> Registered | None:
        """The subject's latest version; None when the subject has none."""
        answer = self._call("GET", f"/subjects/{quote(subject, safe='')}/versions/latest", f"subject '{subject}'", 404)
        if answer is None:
            return None
        return Registered(
            subject=subject,
            version=int(answer["version"]),
            id=int(answer["id"]),
            schema=json.loads(answer["schema"]),
            schema_type=answer.get("schemaType", "AVRO"),
        )

    def register(self, subject: str, schema: Mapping[str, Any], schema_type: SchemaType) -> int:
        """The id of ``schema`` under ``subject``, registered as its next version unless it is already one of
        them; refused (not retriable) when the subject's compatibility level does not allow it.

        A conflict (HTTP 409) is also how Apicurio answers a registration that raced another one under the same
        subject ("artifact already exists"): the schema is then looked up under the subject, and its id returned when
        it is one of its versions; otherwise the refusal stands."""
        path = f"/subjects/{quote(subject, safe='')}/versions"
        try:
            return int(self._send(path, f"registering a schema under '{subject}'", schema, schema_type)["id"])
        except RegistryError as refused:
            found = self.lookup(subject, schema, schema_type) if refused.status == 409 else None
            if found is None:
                raise
            return found

    def lookup(self, subject: str, schema: Mapping[str, Any], schema_type: SchemaType) -> int | None:
        """The id of ``schema`` when it is one of ``subject``'s versions; None otherwise."""
        path = f"/subjects/{quote(subject, safe='')}"
        answer = self._send(path, f"looking up a schema under '{subject}'", schema, schema_type, absent=404)
        return None if answer is None else int(answer["id"])

    def compatible(self, subject: str, schema: Mapping[str, Any], schema_type: SchemaType) -> bool:
        """Whether the subject's compatibility level accepts ``schema`` after its latest version."""
        path = f"/compatibility/subjects/{quote(subject, safe='')}/versions/latest"
        what = f"the compatibility of a schema with '{subject}'"
        return bool(self._send(path, what, schema, schema_type)["is_compatible"])

    def _send(
        self, path: str, what: str, schema: Mapping[str, Any], schema_type: SchemaType, absent: int | None = None
    ) -> Any:
        body = {"schema": json.dumps(schema, separators=(",", ":")), "schemaType": schema_type}
        return self._call("POST", path, what, absent, body=body)

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The schema registered with ``schema_id``."""
        answer = self._call("GET", f"/schemas/ids/{schema_id}", f"schema id {schema_id}")
        return dict(json.loads(answer["schema"]))

    def _call(
        self, method: str, path: str, what: str, absent: int | None = None, body: Mapping[str, Any] | None = None
    ) -> Any:
        """The JSON answer of one request; None for the status ``absent``; a :class:`RegistryError` naming the
        connection, ``what`` was asked and the registry's own message otherwise."""
        where = f"schema registry (connection '{self.registry_conn_id}')"
        return REGISTRY_RETRY.run(
            lambda: self._call_once(method, path, f"{where}: {what}", absent, body),
            RegistryError,
            sleep=time.sleep,
            until=current_deadline(),  # an enclosing deadline (the status view's check) ends the retries too
        )

    def _call_once(self, method: str, path: str, what: str, absent: int | None, body: Mapping[str, Any] | None) -> Any:
        try:
            with deadline(self.timeout_s), self.client.stream(method, path, json=body) as response:
                status, retry_after = response.status_code, response.headers.get("retry-after")
                answer = read_bounded(response, MAX_ANSWER_BYTES, what, "answer", f"{MAX_ANSWER_BYTES // 2**20} MiB")
        except httpx.TimeoutException as exc:
            raise RegistryError(f"{what}: no whole answer within {self.timeout_s:g}s", retriable=True) from exc
        except httpx.HTTPError as exc:
            raise RegistryError(f"{what}: {exc!r}", retriable=True) from exc
        except SourceError as exc:  # an answer over its cap, or one that does not inflate
            raise RegistryError(str(exc), retriable=exc.retriable) from exc
        if status == absent:
            return None
        try:
            document = json.loads(answer)
        except ValueError:
            document = None
        if status != 200:
            detail = document.get("message") if isinstance(document, dict) else None
            detail = detail or answer[:500].decode("utf-8", "replace")
            raise RegistryError(
                f"{what}: HTTP {status}: {str(detail)[:500]}",
                retriable=status in RETRIABLE_STATUS,
                status=status,
                retry_after=retry_after_seconds(retry_after, REGISTRY_RETRY.max_retry_after_s),
            )
        if not isinstance(document, dict):
            raise RegistryError(f"{what}: the answer is not a JSON object ({len(answer)} bytes)", retriable=True)
        return document
