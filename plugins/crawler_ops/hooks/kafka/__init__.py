"""Kafka: the idempotent producer and its publishers, exactly-once delivery, topic checks and the schema registry."""
