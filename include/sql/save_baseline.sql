-- The task's field baseline after a successful run added its profile (in the run's commit transaction).
INSERT INTO crawler_ops.field_baseline (task_id, profile, run_id, before_run)
VALUES (%(task)s, %(profile)s, %(run_id)s, %(before)s)
ON CONFLICT (task_id) DO UPDATE
   SET profile = EXCLUDED.profile, run_id = EXCLUDED.run_id, before_run = EXCLUDED.before_run, updated_at = now()
