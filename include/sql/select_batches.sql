SELECT id, hi, status FROM crawler_ops.batch_status WHERE task_name = %(task)s AND hi > %(from)s ORDER BY id
