-- Done. Fenced: only the holder of the current claim token completes; a worker whose lease was taken
-- over updates nothing.
UPDATE {table}
   SET status = 2, end_time = {now}, attempts = attempts + 1, last_error = NULL
 WHERE task_name = %(task)s AND id = ANY(%(ids)s) AND claim_token = %(token)s AND status = 1
RETURNING id
