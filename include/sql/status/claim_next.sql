-- Claim up to %(limit)s rows of this task in the order sync ranked them (seq), skipping rows other
-- workers hold: status 0 (a failed row only after the retry delay), or status 1 whose lease expired and
-- whose end time is empty. Parentheses matter: the old query's "task AND status=0 OR (...)" claimed
-- other tasks' rows. The pick is MATERIALIZED: a locking subquery that the planner re-scans would pick
-- (and claim) new rows on every scan, far beyond the limit. Rows sync did not rank (seq NULL: outside
-- the configured category) are not claimed.
WITH picked AS MATERIALIZED (
    SELECT st.id
      FROM {table} AS st
     WHERE st.task_name = %(task)s AND st.status < 2 AND st.seq IS NOT NULL
       AND ((st.status = 0 AND (st.attempts = 0 OR st.start_time < {retry_cutoff}))
            OR (st.status = 1 AND {st_end_empty} AND st.start_time < {lease_cutoff}))
     ORDER BY st.seq
     LIMIT %(limit)s
       FOR UPDATE OF st SKIP LOCKED
)
UPDATE {table} AS s
   SET status = 1, start_time = {now}, end_time = NULL, claim_token = %(token)s
  FROM picked
 WHERE s.task_name = %(task)s AND s.id = picked.id
RETURNING s.id
