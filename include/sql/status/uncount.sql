-- Rows a run's workers gave back unprocessed no longer count against its quota.
UPDATE crawler_ops.executor_run
   SET claimed = greatest(claimed - %(rows)s, 0)
 WHERE task_name = %(task)s AND run_id = %(run_id)s
