-- Batch rows by status above the watermark (rows below it are pruned at commit).
SELECT status, count(*) FROM crawler_ops.batch_status WHERE task_name = %(task)s GROUP BY status
