SELECT id, hi FROM crawler_ops.batch_status WHERE task_name = %(task)s AND status = 2 AND hi > %(from)s ORDER BY id
