-- The newest record of a plan's first page: the mark its commit saves.
UPDATE crawler_ops.batch_status SET mark = %(mark)s, mark_date = %(mark_date)s
 WHERE task_name = %(task)s AND id = %(lo)s
