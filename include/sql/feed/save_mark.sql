-- A completed plan's mark; a plan whose first page was empty keeps the mark before it.
UPDATE crawler_ops.progress SET feed_mark = coalesce(%(mark)s, feed_mark),
       feed_mark_date = CASE WHEN %(mark)s IS NULL THEN feed_mark_date ELSE %(mark_date)s END
 WHERE task_id = %(task)s
