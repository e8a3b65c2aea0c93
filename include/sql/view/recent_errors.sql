-- Error rows of the last 24 hours by kind, and the newest reason.
SELECT count(*) FILTER (WHERE kind = 'record') AS records,
       count(*) FILTER (WHERE kind <> 'record') AS batches,
       (array_agg(reason ORDER BY created_at DESC))[1] AS latest
  FROM crawler_ops.crawl_error WHERE task_id = %(task)s AND created_at > now() - interval '24 hours'
