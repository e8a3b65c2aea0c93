-- The stored total and watermark of the given crawl tasks.
SELECT task_id, total, watermark FROM crawler_ops.progress WHERE task_id = ANY(%(tasks)s)
