-- reset=true: forget a task's watermark; the next plan is a first crawl.
DELETE FROM crawler_ops.progress WHERE task_id = %(task)s
