-- An operator's import of the old crawler service's progress: the watermark, total, start offset and counts are
-- replaced (not merged), so importing the same file twice gives the same row.
INSERT INTO crawler_ops.progress (task_id, watermark, total, last_start_offset, status, filtered_count,
                                  produced_count, last_run_id, updated_at)
VALUES (%(task)s, %(watermark)s, %(total)s, %(watermark)s, 'imported', %(filtered)s, %(produced)s, %(run_id)s, now())
ON CONFLICT (task_id) DO UPDATE
   SET watermark = EXCLUDED.watermark, total = coalesce(EXCLUDED.total, crawler_ops.progress.total),
       last_start_offset = EXCLUDED.last_start_offset, status = EXCLUDED.status,
       filtered_count = EXCLUDED.filtered_count, produced_count = EXCLUDED.produced_count,
       last_run_id = EXCLUDED.last_run_id, updated_at = now()
