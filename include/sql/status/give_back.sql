-- Claimed rows a worker will not start: pending again at once, no attempt counted, and no longer counted
-- against the run's quota (in the same statement, so the two never disagree). start_time goes just past the
-- retry delay, so a row that failed before is claimable now as well. Fenced like complete.
WITH given AS (
    UPDATE {table}
       SET status = 0, start_time = {retry_expired}, end_time = NULL, claim_token = NULL
     WHERE task_name = %(task)s AND id = ANY(%(ids)s) AND claim_token = %(token)s AND status = 1
    RETURNING id
), uncounted AS (
    UPDATE crawler_ops.executor_run
       SET claimed = greatest(claimed - (SELECT count(*) FROM given), 0)
     WHERE task_name = %(task)s AND run_id = %(run_id)s
)
SELECT id FROM given
