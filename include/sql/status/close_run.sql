-- A finished run's quota row, and any of the task's left by runs that never finished (older than two days).
DELETE FROM crawler_ops.executor_run
 WHERE task_name = %(task)s AND (run_id = %(run_id)s OR created_at < now() - interval '2 days')
