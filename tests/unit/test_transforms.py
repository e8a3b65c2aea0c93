"""Unit tests of crawler_ops.transforms: the old crawler service's message shape and how a transform learns its
task id."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import msgspec

from crawler_ops.message.filtering import DateRule, Window
from crawler_ops.message.records import build_messages
from crawler_ops.transforms import OLD_JOB_FIELDS, bind_task_id, job_posting, old_job_data

RAW = {
    "id": "a1b2",
    "aae397": "2026-11-20 10:00:00",
    "Collect_time": "2026-11-20T10:05:00+08:00",
    "title": "数据工程师",
    "company": "某公司",
    "city": "北京",
    "salary": "20-30K",
    "education": "本科",
    "description": "负责数据平台",
    "extra": "not in JobData",
}


def test_the_old_shape_has_the_job_data_fields_under_the_source_names_and_the_task_id_inside():
    value = old_job_data(RAW, task_id="jobs_beijing")

    # The seed reads `aae397` and `Collect_time` from the raw record and sets `job.task_id` before producing.
    assert list(value) == [*OLD_JOB_FIELDS, "task_id"]
    assert {"aae397", "Collect_time", "task_id"} <= set(value)
    assert value == {**{name: RAW[name] for name in OLD_JOB_FIELDS}, "task_id": "jobs_beijing"}
    assert "extra" not in value


def test_a_field_the_record_lacks_is_null_in_the_old_shape():
    value = old_job_data({"id": "x", "aae397": "2026-11-20"}, task_id="t")

    assert value["title"] is None and value["Collect_time"] is None and value["task_id"] == "t"


def test_only_a_transform_with_a_keyword_only_task_id_is_given_it():
    bound = bind_task_id(old_job_data, "jobs_beijing")

    assert bound(RAW)["task_id"] == "jobs_beijing"
    assert bind_task_id(job_posting, "jobs_beijing") is job_posting
    assert bind_task_id(dict, "jobs_beijing") is dict


def test_a_published_message_in_the_old_shape_keeps_the_projects_key_and_headers():
    ref = datetime(2026, 11, 20, 12, tzinfo=UTC)
    window = Window.since(ref, days=7, now=ref, tolerance=timedelta(hours=24))
    rule = DateRule(("aae397", "Collect_time"), "Asia/Shanghai")
    headers = [("crawl_task", b"jobs_beijing"), ("run_id", b"r1")]
    raw = [msgspec.Raw(json.dumps(RAW, ensure_ascii=False).encode())]

    page = build_messages(raw, 40, rule, window, "id", headers, bind_task_id(old_job_data, "jobs_beijing"))

    [message] = page.messages
    assert message.key == b"a1b2"
    assert [*message.headers] == [*headers, ("source_offset", b"40")]
    assert json.loads(message.value) == old_job_data(RAW, task_id="jobs_beijing")
