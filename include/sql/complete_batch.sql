-- Mark a claimed batch done. Fenced: only the holder of the current claim token can complete it.
UPDATE crawler_ops.batch_status
   SET status = 2, end_time = now(), attempts = attempts + 1, last_error = NULL, expired = %(expired)s
 WHERE task_name = %(task)s AND id = %(lo)s AND claim_token = %(token)s AND status = 1
RETURNING id
