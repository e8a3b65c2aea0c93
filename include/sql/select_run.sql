SELECT mode, total, old_watermark, new_watermark, planned, fetched, kept, published, expired, dead_lettered, pages,
       errors, notes, ref_time, status, started_at, finished_at, committed_kept, committed_published,
       window_count, drift_sampled, drift_profile
  FROM crawler_ops.crawl_run WHERE task_id = %(task)s AND run_id = %(run_id)s
