-- A crawl batch whose messages Kafka confirmed, in one statement (so it commits as one without a transaction
-- around it): renew the claim of the batch to be produced next (%(renew)s: its id, or none), complete the finished
-- batch (fenced by the claim token: a worker whose lease was taken over completes nothing; marked expired when a
-- first crawl's early stop skipped it), and add its counts and drift profile to its run. Returns the run's shared
-- first-crawl expiry cutoff, how many batches were renewed and how many completed (0 or 1 each).
WITH renewed AS (
    UPDATE crawler_ops.batch_status SET start_time = now()
     WHERE task_name = %(task)s AND id = ANY(%(renew)s) AND claim_token = %(token)s AND status = 1
    RETURNING id
), completed AS (
    UPDATE crawler_ops.batch_status
       SET status = 2, end_time = now(), attempts = attempts + 1, last_error = NULL, expired = expired OR %(skipped)s
     WHERE task_name = %(task)s AND id = %(lo)s AND claim_token = %(token)s AND status = 1
    RETURNING id
), counted AS (
{counts}
)
SELECT (SELECT expiry_cutoff FROM counted), (SELECT count(*) FROM renewed), (SELECT count(*) FROM completed)
