SELECT run_id, mode, status, started_at, finished_at,
       round(extract(epoch FROM coalesce(finished_at, now()) - started_at)::numeric, 3)::float8 AS duration_s,
       planned, fetched, kept, published, expired, dead_lettered, jsonb_array_length(errors) AS errors,
       errors ->> -1 AS last_error
  FROM crawler_ops.crawl_run WHERE task_id = %(task)s
 ORDER BY started_at DESC LIMIT 1
