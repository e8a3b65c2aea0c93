"""Hooks: the source API (httpx), the crawl store (PostgreSQL) and the idempotent Kafka producer."""
