-- Claimed rows a worker will not start: pending again at once, no attempt counted. start_time goes just past
-- the retry delay, so a row that failed before is claimable now as well. Fenced like complete.
UPDATE {table}
   SET status = 0, start_time = {retry_expired}, end_time = NULL, claim_token = NULL
 WHERE task_name = %(task)s AND id = ANY(%(ids)s) AND claim_token = %(token)s AND status = 1
RETURNING id
