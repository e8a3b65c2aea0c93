-- Parked batch rows (status 3) of the given crawl tasks.
SELECT task_name, count(*) FROM crawler_ops.batch_status
 WHERE task_name = ANY(%(tasks)s) AND status = 3 GROUP BY task_name
