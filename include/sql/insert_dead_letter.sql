INSERT INTO crawler_ops.dead_letter (task_id, run_id, source_offset, reason, record)
VALUES (%(task)s, %(run_id)s, %(offset)s, %(reason)s, %(record)s)
