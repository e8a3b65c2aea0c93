-- Forget a task's progress: the next plan is a first crawl. Other tasks' rows are untouched.
DELETE FROM crawler_ops.batch_status WHERE task_name = %(task)s;
DELETE FROM crawler_ops.progress WHERE task_id = %(task)s;
