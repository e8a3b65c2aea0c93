-- The task's field baseline, the run last added to it and the baseline before that run (no row: no baseline yet).
SELECT profile, run_id, before_run FROM crawler_ops.field_baseline WHERE task_id = %(task)s
