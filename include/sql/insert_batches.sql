INSERT INTO crawler_ops.batch_status (id, hi, status, task_name, run_id, expired, end_time)
VALUES (%(lo)s, %(hi)s, %(status)s, %(task)s, %(run_id)s, %(expired)s, CASE WHEN %(status)s = 2 THEN now() END)
ON CONFLICT (id, task_name) DO NOTHING
