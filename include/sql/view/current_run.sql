-- The task's newest run still marked running, with the batches finished since it started (expired batches a
-- first crawl records while planning are not crawled, so they are not counted). Batch rows are pruned only at
-- commit, so while the run goes on this counts every batch it finished.
SELECT r.run_id, r.mode, r.started_at, r.planned,
       (SELECT count(*) FROM crawler_ops.batch_status AS b
         WHERE b.task_name = r.task_id AND b.status = 2 AND NOT b.expired AND b.end_time >= r.started_at) AS done
  FROM crawler_ops.crawl_run AS r
 WHERE r.task_id = %(task)s AND r.status = 'running'
 ORDER BY r.started_at DESC
 LIMIT 1
