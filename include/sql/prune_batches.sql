-- Rows the watermark covers are redundant: the watermark already says they are done.
DELETE FROM crawler_ops.batch_status WHERE task_name = %(task)s AND hi <= %(watermark)s
