"""crawler_ops: incremental crawls of paginated HTTP APIs into Kafka, with progress in PostgreSQL, on Airflow 3."""

from __future__ import annotations

__version__ = "0.1.0"
