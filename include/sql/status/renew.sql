-- Still ours? Renew the lease of a claimed row; nothing when the claim was given back or taken over.
UPDATE {table} SET start_time = {now}
 WHERE task_name = %(task)s AND id = %(id)s AND claim_token = %(token)s AND status = 1
RETURNING id
