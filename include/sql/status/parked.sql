-- The task's parked rows, latest first (start_time of a parked row is when its last attempt failed).
SELECT id, attempts, last_error, start_time
  FROM {table}
 WHERE task_name = %(task)s AND status = 3
 ORDER BY start_time DESC, id
 LIMIT %(limit)s
