-- Batch rows that start below an imported watermark: the watermark now says those offsets are done, and a row
-- reaching across it would overlap the batches planned from it.
DELETE FROM crawler_ops.batch_status WHERE task_name = %(task)s AND id < %(watermark)s RETURNING status
