-- Claim up to %(limit)s rows of this task for one executor worker, in the order sync ranked them (seq), skipping
-- rows other workers hold: status 0 (a failed row only after the retry delay), or status 1 whose lease expired
-- and whose end time is empty. Parentheses matter: "task AND status=0 OR (...)" would claim other tasks' rows.
-- Rows sync did not rank (seq NULL: outside the configured category) are not claimed. The run's quota row caps
-- what all its workers claim together: every claim locks it (FOR UPDATE re-reads it after waiting), so
-- concurrent claims of one run take turns on it, and the claim adds what it took. The candidates are read with a
-- plain LIMIT (so the planner walks the open-rows index) and cut to the quota afterwards. A locking subquery the
-- planner re-scans would claim new rows on every scan, hence MATERIALIZED. Returns each claimed row's id,
-- whether its source row still exists, and its output fields; the source rows are looked up by their ids
-- (= ANY), so the source table is never scanned whole.
WITH quota AS MATERIALIZED (
    SELECT q.quota - q.claimed AS rows_left
      FROM crawler_ops.executor_run AS q
     WHERE q.task_name = %(task)s AND q.run_id = %(run_id)s
       FOR UPDATE
), candidates AS MATERIALIZED (
    SELECT st.id, st.seq
      FROM {table} AS st
     WHERE st.task_name = %(task)s AND st.status < 2 AND st.seq IS NOT NULL
       AND ((st.status = 0 AND (st.attempts = 0 OR st.start_time < {retry_cutoff}))
            OR (st.status = 1 AND {st_end_empty} AND st.start_time < {lease_cutoff}))
     ORDER BY st.seq
     LIMIT %(limit)s
       FOR UPDATE OF st SKIP LOCKED
), picked AS (
    SELECT c.id
      FROM (SELECT id, row_number() OVER (ORDER BY seq) AS n FROM candidates) AS c
     WHERE c.n <= coalesce((SELECT rows_left FROM quota), 0)
), claimed AS (
    UPDATE {table} AS s
       SET status = 1, start_time = {now}, end_time = NULL, claim_token = %(token)s
      FROM picked
     WHERE s.task_name = %(task)s AND s.id = picked.id
    RETURNING s.id, s.seq
), counted AS (
    UPDATE crawler_ops.executor_run AS q
       SET claimed = q.claimed + (SELECT count(*) FROM claimed)
     WHERE q.task_name = %(task)s AND q.run_id = %(run_id)s
)
SELECT c.id, src.{source_id} IS NOT NULL, {columns}
  FROM claimed AS c
  LEFT JOIN (SELECT * FROM {source} AS s WHERE s.{source_id} = ANY(ARRAY(SELECT id FROM claimed))) AS src
         ON src.{source_id} = c.id
 ORDER BY c.seq
