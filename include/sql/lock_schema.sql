-- Serialise concurrent creation of the crawler_ops schema (transaction-scoped).
SELECT pg_advisory_xact_lock(hashtextextended('crawler_ops.schema', 0))
