UPDATE crawler_ops.crawl_run
   SET new_watermark = %(watermark)s, status = %(status)s, errors = %(errors)s, finished_at = now(),
       committed_kept = kept, committed_published = published
 WHERE task_id = %(task)s AND run_id = %(run_id)s
