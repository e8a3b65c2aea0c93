-- Claim given rows: pending, or claimed with an expired lease and no end time, or claimed by an earlier
-- try of this same worker (claim_token starting with %(owner)s), which cannot still be running.
UPDATE {table}
   SET status = 1, start_time = {now}, end_time = NULL, claim_token = %(token)s
 WHERE task_name = %(task)s AND id = ANY(%(ids)s)
   AND ((status = 0 AND (attempts = 0 OR start_time < {retry_cutoff}))
        OR (status = 1 AND {end_empty} AND (start_time < {lease_cutoff} OR claim_token LIKE %(owner)s)))
RETURNING id
