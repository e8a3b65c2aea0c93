-- A run that ended without its commit (marked failed in the UI or REST API, or its commit never ran): close
-- its record as failed. Only a record still 'running' changes, so a run its commit finished is left alone.
UPDATE crawler_ops.crawl_run
   SET status = 'failed', finished_at = now(), errors = errors || jsonb_build_array(%(error)s::text)
 WHERE task_id = %(task)s AND run_id = %(run_id)s AND status = 'running'
RETURNING run_id
