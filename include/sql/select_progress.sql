SELECT watermark, total FROM crawler_ops.progress WHERE task_id = %(task)s
