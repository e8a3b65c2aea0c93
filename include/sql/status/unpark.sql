-- Parked rows back to pending with a fresh attempt count: all of the task's, or only the given ids. The
-- last error stays until the row runs again.
UPDATE {table}
   SET status = 0, attempts = 0, start_time = {now}, end_time = NULL, claim_token = NULL
 WHERE task_name = %(task)s AND status = 3 AND (%(all)s OR id = ANY(%(ids)s))
RETURNING id
