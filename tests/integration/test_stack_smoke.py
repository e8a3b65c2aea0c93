"""One round trip through every real part of the stack, with the same clients the DAGs use."""

from __future__ import annotations

import httpx
import pytest
from airflow.providers.apache.kafka.hooks.client import KafkaAdminClientHook
from airflow.providers.apache.kafka.hooks.produce import KafkaProducerHook
from airflow.providers.postgres.hooks.postgres import PostgresHook

from tests.support import read_topic, source_admin_headers

pytestmark = pytest.mark.integration


def test_kafka_producer_hook_round_trip(kafka_bootstrap, unique_id):
    topic = f"smoke.{unique_id}"
    KafkaAdminClientHook(kafka_config_id="kafka_default").create_topic([(topic, 1, 1)])
    producer = KafkaProducerHook(kafka_config_id="kafka_default").get_producer()
    reports = []
    producer.produce(
        topic, key=b"k1", value='{"title": "数据工程师"}'.encode(), on_delivery=lambda err, msg: reports.append(err)
    )
    assert producer.flush(30) == 0
    assert reports == [None]

    messages = read_topic(kafka_bootstrap, topic)

    assert [(m.key, m.value) for m in messages] == [("k1", {"title": "数据工程师"})]


def test_postgres_hook_round_trip(pg_schema):
    hook = PostgresHook(postgres_conn_id="crawler_db")
    with hook.get_conn() as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".smoke (id int PRIMARY KEY, city text)')
        conn.execute(f'INSERT INTO "{pg_schema}".smoke VALUES (%s, %s)', (1, "北京"))
        conn.commit()

    assert hook.get_records(f'SELECT id, city FROM "{pg_schema}".smoke') == [(1, "北京")]


def test_demo_source_page_over_http(source_url, unique_id):
    with httpx.Client(base_url=source_url, headers=source_admin_headers()) as client:
        client.put(f"/admin/tasks/{unique_id}", json={"total": 250}).raise_for_status()
        total = client.get(f"/api/{unique_id}/count").json()["data"]["total"]
        page = client.get(f"/api/{unique_id}/list", params={"offset": 200, "limit": 100}).json()

    assert total == 250
    assert page["data"]["total"] == 250
    records = page["data"]["data"]
    assert len(records) == 50
    assert {"id", "aae397", "Collect_time", "title", "company", "city", "salary", "description"} <= set(records[0])
