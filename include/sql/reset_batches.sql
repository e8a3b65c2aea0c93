-- reset=true: forget a task's batch rows (other tasks' rows are untouched).
DELETE FROM crawler_ops.batch_status WHERE task_name = %(task)s
