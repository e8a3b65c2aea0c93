-- The total a watched task's trigger has just announced.
INSERT INTO crawler_ops.source_watch (task_id, total, announced_at)
VALUES (%(task)s, %(total)s, clock_timestamp())
ON CONFLICT (task_id) DO UPDATE SET total = excluded.total, announced_at = excluded.announced_at
