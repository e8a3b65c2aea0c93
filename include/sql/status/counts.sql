SELECT status, count(*) FROM {table} WHERE task_name = %(task)s GROUP BY status ORDER BY status
