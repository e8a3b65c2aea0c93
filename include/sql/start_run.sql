-- (Re)start a run's record: a re-planned run starts its counters again.
INSERT INTO crawler_ops.crawl_run (task_id, run_id, mode, ref_time, total, old_watermark, planned, window_count)
VALUES (%(task)s, %(run_id)s, %(mode)s, %(ref)s, %(total)s, %(watermark)s, %(planned)s, %(window_count)s)
ON CONFLICT (task_id, run_id) DO UPDATE
   SET mode = EXCLUDED.mode, ref_time = EXCLUDED.ref_time, total = EXCLUDED.total,
       old_watermark = EXCLUDED.old_watermark, planned = EXCLUDED.planned, fetched = 0, kept = 0,
       published = 0, expired = 0, dead_lettered = 0, pages = 0, errors = '[]'::jsonb, notes = '[]'::jsonb,
       expiry_cutoff = 0, status = 'running', started_at = now(), finished_at = NULL, new_watermark = NULL,
       committed_kept = 0, committed_published = 0,
       window_count = EXCLUDED.window_count, drift_sampled = 0, drift_profile = '{}'::jsonb, drift = NULL
