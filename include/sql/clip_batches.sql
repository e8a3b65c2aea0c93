-- The source shrank: a batch row not done that reaches past the new total ends at it, so it is fetched whole
-- (a page past the end is short) and, once done, moves the watermark no further than what was read.
UPDATE crawler_ops.batch_status SET hi = %(total)s
 WHERE task_name = %(task)s AND status <> 2 AND id < %(total)s AND hi > %(total)s
