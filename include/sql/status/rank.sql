-- Rank this task's open rows in the configured order (once per run, in sync), so a claim reads the next
-- rows from the open-rows index instead of joining and sorting the source every time. Open rows outside
-- the configured category lose their rank and are not claimed.
UPDATE {table} AS st
   SET seq = ranked.seq
  FROM (SELECT o.id, o.task_name,
               CASE WHEN src.{source_id} IS NOT NULL {category_check}
                    THEN row_number() OVER (ORDER BY src.{source_id} IS NULL, {order_by}) END AS seq
          FROM {table} AS o
          LEFT JOIN {source} AS src ON src.{source_id} = o.id
         WHERE o.task_name = %(task)s AND o.status < 2) AS ranked
 WHERE st.task_name = ranked.task_name AND st.id = ranked.id AND st.seq IS DISTINCT FROM ranked.seq
