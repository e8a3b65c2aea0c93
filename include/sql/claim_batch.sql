-- Claim one batch row for this worker: pending, or claimed with an expired lease, or claimed by an
-- earlier try of this same worker (run + map index), which cannot still be running. Own task only.
UPDATE crawler_ops.batch_status
   SET status = 1, start_time = now(), end_time = NULL, claim_token = %(token)s, run_id = %(run_id)s
 WHERE task_name = %(task)s AND id = %(lo)s
   AND (status = 0
        OR (status = 1 AND end_time IS NULL
            AND (start_time < now() - make_interval(secs => %(lease_s)s) OR claim_token LIKE %(owner)s)))
RETURNING id
