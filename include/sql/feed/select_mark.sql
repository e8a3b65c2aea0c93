SELECT feed_mark, feed_mark_date FROM crawler_ops.progress WHERE task_id = %(task)s
