-- The status of the given rows of a task (rows it does not have are absent).
SELECT id, status FROM {table} WHERE task_name = %(task)s AND id = ANY(%(ids)s) ORDER BY id
