-- A run's drift against the task's baseline, found by its commit.
UPDATE crawler_ops.crawl_run SET drift = %(drift)s WHERE task_id = %(task)s AND run_id = %(run_id)s
