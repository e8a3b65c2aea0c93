-- Rank this task's open rows (once per run, in sync), so a claim reads the next rows from the open-rows index
-- instead of joining and sorting the source every time. Rows are ordered by the configured order within
-- their {group} (one group unless every category is configured), and the groups take turns: the first row of
-- each group, then the second of each, and so on. Open rows outside the configured category, or whose source
-- row is gone, lose their rank and are not claimed.
UPDATE {table} AS st
   SET seq = ranked.seq
  FROM (SELECT t.id, t.task_name,
               CASE WHEN t.in_scope THEN row_number() OVER (ORDER BY t.in_scope DESC, t.turn, t.grp NULLS LAST) END
                   AS seq
          FROM (SELECT o.id, o.task_name, {group} AS grp,
                       coalesce(src.{source_id} IS NOT NULL {category_check}, false) AS in_scope,
                       row_number() OVER (PARTITION BY coalesce(src.{source_id} IS NOT NULL {category_check}, false),
                                                       {group}
                                          ORDER BY {order_by}) AS turn
                  FROM {table} AS o
                  LEFT JOIN {source} AS src ON src.{source_id} = o.id
                 WHERE o.task_name = %(task)s AND o.status < 2) AS t) AS ranked
 WHERE st.task_name = ranked.task_name AND st.id = ranked.id AND st.seq IS DISTINCT FROM ranked.seq
