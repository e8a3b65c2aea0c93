-- A task's stored progress, row-locked until the transaction ends (an import reads it before replacing it).
SELECT watermark, total, filtered_count, produced_count FROM crawler_ops.progress WHERE task_id = %(task)s FOR UPDATE
