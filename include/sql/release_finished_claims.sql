-- Claims still held for runs whose record is closed (their commit ran, or the run was cancelled and the
-- listener closed it): those workers are gone or going, so the batches go back to pending now instead of
-- after the lease. A late worker's completion is fenced by its claim token.
UPDATE crawler_ops.batch_status AS b SET status = 0, claim_token = NULL, end_time = NULL
  FROM crawler_ops.crawl_run AS r
 WHERE b.task_name = %(task)s AND b.status = 1 AND r.task_id = b.task_name AND r.status <> 'running'
   AND left(b.claim_token, length(r.run_id) + 1) = r.run_id || '|'
