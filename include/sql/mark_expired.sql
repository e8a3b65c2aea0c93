-- A batch finished without fetching because a first crawl's early stop put it below the expiry cutoff.
UPDATE crawler_ops.batch_status SET expired = true WHERE task_name = %(task)s AND id = %(lo)s
