-- Per crawl task: seconds since its last successful run finished, and its last finished run's duration and records
-- fetched (run rows are kept for maintenance.keep_runs_days, so this reads a bounded history).
SELECT task_id,
       extract(epoch FROM now() - max(finished_at) FILTER (WHERE status = 'success'))::float8 AS seconds_since_success,
       (array_agg(duration_s ORDER BY finished_at DESC) FILTER (WHERE finished_at IS NOT NULL))[1] AS last_run_duration_s,
       (array_agg(fetched ORDER BY finished_at DESC) FILTER (WHERE finished_at IS NOT NULL))[1] AS last_run_fetched
  FROM crawler_ops.crawl_run WHERE task_id = ANY(%(tasks)s) GROUP BY task_id
