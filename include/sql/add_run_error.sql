UPDATE crawler_ops.crawl_run SET errors = errors || jsonb_build_array(%(error)s::text)
 WHERE task_id = %(task)s AND run_id = %(run_id)s
