-- What a watched task's trigger compares the source's total with: the total its last commit saw, the total the
-- trigger last announced and that announcement's age in seconds (PostgreSQL's clock).
SELECT (SELECT total FROM crawler_ops.progress WHERE task_id = %(task)s) AS committed,
       w.total AS announced,
       extract(epoch FROM clock_timestamp() - w.announced_at)::double precision AS age_s
FROM (SELECT 1) AS one
LEFT JOIN crawler_ops.source_watch AS w ON w.task_id = %(task)s
