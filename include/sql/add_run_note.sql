UPDATE crawler_ops.crawl_run SET notes = notes || jsonb_build_array(%(note)s::text)
 WHERE task_id = %(task)s AND run_id = %(run_id)s
