-- The next page of a feed, pending, with the position that fetches it.
INSERT INTO crawler_ops.batch_status (id, hi, status, task_name, run_id, cursor)
VALUES (%(lo)s, %(lo)s + 1, 0, %(task)s, %(run_id)s, %(cursor)s)
ON CONFLICT (id, task_name) DO NOTHING
