SELECT watermark, total, last_start_offset, status, updated_at AS last_update, filtered_count, produced_count,
       last_run_id
  FROM crawler_ops.progress WHERE task_id = %(task)s
