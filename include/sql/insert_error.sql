INSERT INTO crawler_ops.crawl_error (task_id, run_id, kind, source_offset, offset_end, reason, record)
VALUES (%(task)s, %(run_id)s, %(kind)s, %(offset)s, %(offset_end)s, %(reason)s, %(record)s)
