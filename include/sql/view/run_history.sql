-- The task's last %(limit)s finished runs, newest first, for the status page's charts: counts, duration and the
-- backlog each left (source total minus the watermark it committed; NULL when it committed none).
SELECT run_id, mode, status, started_at, duration_s, fetched, kept, published,
       total - new_watermark AS backlog
  FROM crawler_ops.crawl_run
 WHERE task_id = %(task)s AND finished_at IS NOT NULL
 ORDER BY started_at DESC
 LIMIT %(limit)s
