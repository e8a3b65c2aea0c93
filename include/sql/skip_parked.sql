-- An operator lets the watermark pass parked batches (all of the task's, or the one starting at %(lo)s): they
-- count as done without their records, which the caller records as errors.
UPDATE crawler_ops.batch_status SET status = 2, end_time = now(), claim_token = NULL
 WHERE task_name = %(task)s AND status = 3 AND (%(lo)s::bigint IS NULL OR id = %(lo)s::bigint)
RETURNING id, hi, attempts, last_error
