SELECT id, hi, attempts, last_error FROM crawler_ops.batch_status
 WHERE task_name = %(task)s AND status = 3 ORDER BY id
