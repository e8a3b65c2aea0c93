-- Failed: back to pending with the error and the attempt counted (claimable again after the retry
-- delay, counted from start_time), or parked (3) at max_attempts (NULL: never park). Fenced like complete.
UPDATE {table}
   SET status = CASE WHEN %(max_attempts)s::int IS NOT NULL AND attempts + 1 >= %(max_attempts)s::int
                     THEN 3 ELSE 0 END,
       start_time = {now}, end_time = NULL, attempts = attempts + 1, last_error = %(error)s,
       claim_token = NULL
 WHERE task_name = %(task)s AND id = %(id)s AND claim_token = %(token)s AND status = 1
RETURNING status
