-- Run history rows that finished before the cutoff (or started before it and never finished: the run was
-- cancelled or its commit never ran), at most %(limit)s per statement.
DELETE FROM crawler_ops.crawl_run
 WHERE ctid = ANY(ARRAY(
       SELECT ctid FROM crawler_ops.crawl_run
        WHERE coalesce(finished_at, started_at) < now() - make_interval(secs => %(age_s)s)
        LIMIT %(limit)s))
