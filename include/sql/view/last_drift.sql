-- The field drift of the task's newest run whose commit found one (the run in progress has none yet).
SELECT run_id, status, finished_at, drift
  FROM crawler_ops.crawl_run WHERE task_id = %(task)s AND drift IS NOT NULL
 ORDER BY finished_at DESC NULLS LAST LIMIT 1
