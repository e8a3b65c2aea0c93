INSERT INTO crawler_ops.progress (task_id, watermark, total, last_start_offset, status, filtered_count,
                                  produced_count, last_run_id, last_ref_time, updated_at)
VALUES (%(task)s, %(watermark)s, %(total)s, %(last_start)s, %(status)s, %(kept)s, %(published)s, %(run_id)s,
        %(ref)s, now())
ON CONFLICT (task_id) DO UPDATE
   SET watermark = GREATEST(crawler_ops.progress.watermark, EXCLUDED.watermark), total = EXCLUDED.total,
       -- a run that planned nothing keeps the start offset of the last run that planned something
       last_start_offset = coalesce(EXCLUDED.last_start_offset, crawler_ops.progress.last_start_offset),
       status = EXCLUDED.status,
       filtered_count = crawler_ops.progress.filtered_count + EXCLUDED.filtered_count,
       produced_count = crawler_ops.progress.produced_count + EXCLUDED.produced_count,
       last_run_id = EXCLUDED.last_run_id,
       last_ref_time = GREATEST(crawler_ops.progress.last_ref_time, EXCLUDED.last_ref_time), updated_at = now()
