-- Still ours? Renew the leases of claimed rows; a row given back or taken over is left alone (not returned).
UPDATE {table} SET start_time = {now}
 WHERE task_name = %(task)s AND id = ANY(%(ids)s) AND claim_token = %(token)s AND status = 1
RETURNING id
