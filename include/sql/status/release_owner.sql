-- Claims a finished run left behind (its worker failed or was cancelled) go back to pending.
UPDATE {table} SET status = 0, claim_token = NULL, end_time = NULL
 WHERE task_name = %(task)s AND status = 1 AND claim_token LIKE %(owner)s
