-- Done crawl batch rows below their task's watermark that finished before the cutoff (commit prunes these
-- already; this catches rows left by a commit that never ran). Rows above the watermark are progress.
DELETE FROM crawler_ops.batch_status
 WHERE ctid = ANY(ARRAY(
       SELECT b.ctid FROM crawler_ops.batch_status AS b
         JOIN crawler_ops.progress AS p ON p.task_id = b.task_name
        WHERE b.status = 2 AND b.hi <= p.watermark
          AND coalesce(b.end_time, b.start_time) < now() - make_interval(secs => %(age_s)s)
        LIMIT %(limit)s))
