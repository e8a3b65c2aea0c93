-- Add one batch's counts to its run, in the same transaction as the batch's completion; returns the
-- shared first-crawl expiry cutoff so every chunk sees an early stop found by another.
UPDATE crawler_ops.crawl_run
   SET fetched = fetched + %(fetched)s, kept = kept + %(kept)s, published = published + %(published)s,
       expired = expired + %(expired)s, dead_lettered = dead_lettered + %(dead_lettered)s, pages = pages + %(pages)s,
       expiry_cutoff = GREATEST(expiry_cutoff, %(cutoff)s)
 WHERE task_id = %(task)s AND run_id = %(run_id)s
RETURNING expiry_cutoff
