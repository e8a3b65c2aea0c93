-- Runs of a task that planned from its watermark and have not committed: their commit would move the watermark
-- from what they planned.
SELECT run_id FROM crawler_ops.crawl_run
 WHERE task_id = %(task)s AND status = 'running' AND mode IN ('first', 'incremental')
 ORDER BY started_at
