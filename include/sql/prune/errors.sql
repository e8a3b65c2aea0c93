-- Error and dead-letter rows older than the cutoff, at most %(limit)s per statement.
DELETE FROM crawler_ops.crawl_error
 WHERE ctid = ANY(ARRAY(
       SELECT ctid FROM crawler_ops.crawl_error
        WHERE created_at < now() - make_interval(secs => %(age_s)s)
        LIMIT %(limit)s))
