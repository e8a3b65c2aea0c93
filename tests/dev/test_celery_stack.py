"""The Celery settings of the local stack (dev/celery_stack.py), without starting anything."""

from __future__ import annotations

import socket

import pytest

import airflow_stack
import celery_stack
import worker_hostname


def test_every_airflow_process_gets_the_broker_the_results_db_and_the_executor():
    env = celery_stack.celery_env(16379, "postgresql+psycopg2://postgres@127.0.0.1:15432/airflow")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://127.0.0.1:16379/0"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+postgresql://postgres@127.0.0.1:15432/airflow"


def test_each_worker_reports_its_own_hostname(monkeypatch: pytest.MonkeyPatch):
    names = []
    for index in (1, 2):
        for key, value in celery_stack.worker_env(index).items():
            monkeypatch.setenv(key, value)
        names.append(worker_hostname.hostname())
    assert names == ["celery-worker-1", "celery-worker-2"]
    assert celery_stack.worker_command("airflow", 2)[-3:] == [
        "--celery-hostname",
        "celery-worker-2@%h",
        "--skip-serve-logs",
    ]


def test_without_the_variable_the_hostname_is_the_machines(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CRAWLER_OPS_WORKER_HOSTNAME", raising=False)
    assert worker_hostname.hostname() == socket.getfqdn()


def test_a_missing_redis_without_root_names_the_command_to_run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(celery_stack.shutil, "which", lambda name: None)
    monkeypatch.setattr(celery_stack.os, "geteuid", lambda: 1000)
    with pytest.raises(celery_stack.RedisMissing, match="apt-get install -y redis-server"):
        celery_stack.redis_server(print)


def test_an_unknown_executor_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(airflow_stack, "load_state", lambda: {"env": {}})
    with pytest.raises(airflow_stack.StackError, match="unknown executor 'kubernetes'"):
        airflow_stack.airflow_up("kubernetes", 2)


STACK_CONFIG, STACK_DB = "/repo/include/crawler_tasks.yaml", "postgresql+psycopg2://postgres@127.0.0.1:1/airflow"
RUNNING = {
    "env": {"CRAWLER_OPS_CONFIG": STACK_CONFIG, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": STACK_DB},
    "airflow": {"settings": {"CRAWLER_OPS_CONFIG": "/tmp/t.yaml", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "pg/svc"}},
}


@pytest.fixture
def no_caller_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in airflow_stack.CALLER_SETTINGS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_a_service_restarted_beside_a_running_airflow_gets_that_airflows_config_and_db(no_caller_settings):
    no_caller_settings.setattr(airflow_stack, "running_pid", lambda name: 4242)
    assert airflow_stack.wanted_settings(RUNNING) == RUNNING["airflow"]["settings"]
    no_caller_settings.setenv("CRAWLER_OPS_CONFIG", "/tmp/other.yaml")
    assert airflow_stack.wanted_settings(RUNNING)["CRAWLER_OPS_CONFIG"] == "/tmp/other.yaml"


def test_without_a_running_airflow_the_stacks_config_and_db_are_served(no_caller_settings):
    no_caller_settings.setattr(airflow_stack, "running_pid", lambda name: None)
    assert airflow_stack.wanted_settings(RUNNING) == RUNNING["env"]
