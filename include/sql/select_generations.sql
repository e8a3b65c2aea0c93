-- The run that created each batch row: an exactly-once marker counts only for the row it was written for.
SELECT id, run_id FROM crawler_ops.batch_status WHERE task_name = %(task)s AND id = ANY(%(ids)s)
