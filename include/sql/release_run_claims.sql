-- Claims this run made and did not finish (a chunk failed or was cancelled) go back to pending.
UPDATE crawler_ops.batch_status
   SET status = 0, claim_token = NULL, end_time = NULL
 WHERE task_name = %(task)s AND status = 1 AND run_id = %(run_id)s
