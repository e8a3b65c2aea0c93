-- A run's quota row; a worker's retry finds the one its run already has.
INSERT INTO crawler_ops.executor_run (task_name, run_id, quota)
VALUES (%(task)s, %(run_id)s, %(quota)s)
ON CONFLICT (task_name, run_id) DO NOTHING
