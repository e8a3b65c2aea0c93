SELECT last_ref_time FROM crawler_ops.progress WHERE task_id = %(task)s
