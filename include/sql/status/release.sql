-- Failed rows: back to pending with their error and the attempt counted (claimable again after the retry
-- delay, counted from start_time), or parked (3) at max_attempts (NULL: never park). Fenced like complete.
UPDATE {table} AS s
   SET status = CASE WHEN %(max_attempts)s::int IS NOT NULL AND s.attempts + 1 >= %(max_attempts)s::int
                     THEN 3 ELSE 0 END,
       start_time = {now}, end_time = NULL, attempts = s.attempts + 1, last_error = f.error, claim_token = NULL
  FROM unnest(%(ids)s::bigint[], %(errors)s::text[]) AS f(id, error)
 WHERE s.task_name = %(task)s AND s.id = f.id AND s.claim_token = %(token)s AND s.status = 1
RETURNING s.id, s.status
