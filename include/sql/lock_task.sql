-- Serialise planning and committing of one crawl task across runs and processes (transaction-scoped).
SELECT pg_advisory_xact_lock(hashtextextended('crawler_ops.crawl:' || %(task)s, 0))
