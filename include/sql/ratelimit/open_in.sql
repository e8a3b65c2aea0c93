-- Seconds until the next request slot of a source connection is due, on PostgreSQL's clock (0: due now). A
-- deferred chunk's trigger asks this: the chunk resumes once the pause of a Retry-After, or the queue, is over.
SELECT greatest(0, next_slot - extract(epoch FROM clock_timestamp())::double precision)
  FROM crawler_ops.source_rate
 WHERE source = %(source)s
