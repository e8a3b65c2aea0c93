-- Add the source ids this task has not seen yet, set-wise (no LIMIT/OFFSET paging).
INSERT INTO {table} (id, status, start_time, end_time, task_name)
SELECT src.{source_id}, 0, {now}, NULL, %(task)s
  FROM {source} AS src
 WHERE TRUE {category_filter}
ON CONFLICT (id, task_name) DO NOTHING
