-- Give a claimed batch back after a failure: pending again, with the error and the attempt counted.
UPDATE crawler_ops.batch_status
   SET status = 0, end_time = NULL, attempts = attempts + 1, last_error = %(error)s, claim_token = NULL
 WHERE task_name = %(task)s AND id = %(lo)s AND claim_token = %(token)s AND status = 1
