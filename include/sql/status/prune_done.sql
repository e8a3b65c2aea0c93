-- Done rows of one task that finished before the cutoff and whose source row is gone, at most %(limit)s.
-- A done row whose source row still exists is kept: it is what stops the next sync from queueing that
-- source row again.
DELETE FROM {table}
 WHERE ctid = ANY(ARRAY(
       SELECT st.ctid FROM {table} AS st
        WHERE st.task_name = %(task)s AND st.status = 2 AND st.end_time < {age_cutoff}
          AND NOT EXISTS (SELECT 1 FROM {source} AS src WHERE src.{source_id} = st.id)
        LIMIT %(limit)s))
