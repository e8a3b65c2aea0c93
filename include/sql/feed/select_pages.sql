-- A feed's page rows from the watermark on (the open plan): page number, status, position, the plan's new mark.
SELECT id, status, cursor, mark, mark_date FROM crawler_ops.batch_status
 WHERE task_name = %(task)s AND id >= %(from)s ORDER BY id
