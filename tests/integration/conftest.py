"""Session fixtures of the integration tests that need Airflow's services (see airflow_session.py)."""

from tests.integration.airflow_session import airflow, statsd, task_ids, webhook

__all__ = ["airflow", "statsd", "task_ids", "webhook"]
