"""Pure pieces of the operations features: webhook signing and URLs, dead-letter messages, status text, config."""

from __future__ import annotations

import hashlib
import hmac
import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler_ops.__main__ import render_text
from crawler_ops.config import KafkaConfig, MaintenanceConfig, NotifyConfig, parse_config
from crawler_ops.notify import sign, webhook_url
from crawler_ops.records import dead_letter_messages


@given(st.text(min_size=1), st.text(alphabet="0123456789", min_size=1, max_size=12), st.binary())
def test_the_signature_is_the_hmac_of_timestamp_dot_body(secret, timestamp, body):
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()

    assert sign(secret, timestamp, body) == f"sha256={expected}"
    assert sign(secret, timestamp, body) != sign(secret + "x", timestamp, body)
    assert sign(secret, timestamp, body) != sign(secret, timestamp + "1", body)


def conn(**fields: object) -> SimpleNamespace:
    base = {"conn_id": "hook", "host": None, "schema": None, "port": None, "extra_dejson": {}}
    return SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"host": "https://hooks.example.com/crawl?x=1"}, "https://hooks.example.com/crawl?x=1"),
        ({"host": "hooks.example.com"}, "https://hooks.example.com"),
        (
            {"host": "127.0.0.1", "schema": "http", "port": 8080, "extra_dejson": {"path": "in"}},
            "http://127.0.0.1:8080/in",
        ),
        ({"host": "h", "extra_dejson": {"path": "/a/b"}}, "https://h/a/b"),
    ],
)
def test_the_webhook_url_comes_from_the_connection(fields, url):
    assert webhook_url(conn(**fields)) == url


def test_a_connection_without_host_is_rejected_by_name():
    with pytest.raises(ValueError, match="connection 'hook' has no host"):
        webhook_url(conn())


def test_dead_letter_messages_carry_the_record_reason_and_offset():
    (message,) = dead_letter_messages(
        [(42, "aae397='x' unparseable", {"id": "r1", "aae397": "x"})], "t.dead", "task", "run-1", "id", [("h", b"v")]
    )

    assert message.topic == "t.dead" and message.key == b"r1"
    assert json.loads(message.value) == {
        "task": "task",
        "run_id": "run-1",
        "source_offset": 42,
        "reason": "aae397='x' unparseable",
        "record": {"id": "r1", "aae397": "x"},
    }
    assert ("source_offset", b"42") in message.headers and ("h", b"v") in message.headers


def test_a_dead_letter_without_a_mapping_record_is_keyed_by_task_and_offset():
    (message,) = dead_letter_messages([(7, "not an object", [1, 2])], "d", "task", "r", "id", [])

    assert message.key == b"task:7"


def test_config_validates_notify_dead_letter_topic_and_maintenance():
    loaded = parse_config(
        {
            "tasks": [
                {"id": "a", "kafka": {"topic": "a", "dead_letter_topic": "bad topic!"}},
                {"id": "b", "kafka": {"topic": "b"}, "notify": {"conn_id": "h", "on": ["sometimes"]}},
                {"id": "c", "kafka": {"topic": "c", "consumer_groups": ["g"]}, "notify": {"conn_id": "h"}},
            ],
            "maintenance": {"delete_batch": 0},
        }
    )

    assert "field 'kafka.dead_letter_topic'" in loaded.errors["a"]
    assert "field 'notify.on.0'" in loaded.errors["b"]
    (good,) = loaded.tasks
    assert good.notify == NotifyConfig(conn_id="h") and good.notify.on == ("success", "failure")
    assert good.kafka.asset_uri == "kafka://kafka_default/c"
    assert loaded.maintenance is None and "maintenance: field 'delete_batch'" in (loaded.maintenance_error or "")
    assert parse_config({"tasks": []}).maintenance == MaintenanceConfig()
    assert KafkaConfig(topic="t", asset_host="b:9092").asset_uri == "kafka://b:9092/t"


def test_status_text_shows_the_old_service_fields_and_errors():
    report = {
        "generated_at": "2026-11-29T00:00:00+00:00",
        "tasks": [
            {
                "task_id": "jobs",
                "task_name": "招聘",
                "dag_id": "crawl_jobs",
                "topic": "jobs",
                "running": None,
                "source_total": None,
                "source_error": "ConnectError: refused",
                "total": 100,
                "watermark": 90,
                "progress": "90.0%",
                "last_start_offset": None,
                "status": "incomplete",
                "last_update": "2026-11-28",
                "filtered_count": 5,
                "produced_count": 5,
                "kafka": {"messages": 5, "groups": {"g": {"lag": 2}, "h": {"error": "unknown group"}}},
                "errors_24h": {"records": 1, "batches": 2, "latest": "HTTP 500"},
            }
        ],
        "invalid_tasks": [{"task_id": "bad", "error": "field 'batch_size': too small"}],
    }

    text = render_text(report)

    assert "jobs (招聘)  dag crawl_jobs  topic jobs" in text
    assert "source total ? (ConnectError: refused)" in text and "watermark 90 (90.0%)" in text
    assert "last start offset -" in text and "running unknown" in text and "filtered 5  produced 5" in text
    assert "errors (24h): 1 records, 2 batch/plan; latest: HTTP 500" in text
    assert "5 messages; g lag 2, h ? (unknown group)" in text
    assert "bad: INVALID CONFIG: field 'batch_size': too small" in text


def test_the_dead_letter_topic_must_differ_and_maintenance_takes_the_shared_defaults():
    loaded = parse_config(
        {
            "defaults": {"postgres_conn_id": "pg_main", "schedule": "@hourly", "retries": 5},
            "tasks": [{"id": "a", "kafka": {"topic": "a", "dead_letter_topic": "a"}}],
            "maintenance": {"keep_runs_days": 0.5},
        }
    )
    assert "dead_letter_topic must differ from topic" in loaded.errors["a"]
    assert "keep_runs_days" in (loaded.maintenance_error or "")

    shared = parse_config({"defaults": {"postgres_conn_id": "pg_main", "schedule": "@hourly", "retries": 5}})
    assert shared.maintenance is not None
    assert shared.maintenance.postgres_conn_id == "pg_main"
    assert (shared.maintenance.schedule, shared.maintenance.retries) == ("@daily", 1), "the crawl schedule is not"
