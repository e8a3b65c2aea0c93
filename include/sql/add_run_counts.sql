-- Add one batch's counts and drift profile to its run, in the same transaction as the batch's completion; returns
-- the shared first-crawl expiry cutoff so every chunk sees an early stop found by another. The profiles add up field
-- by field and type by type, and stay bounded as crawler_ops.drift.FieldProfile.__add__ bounds them: at most
-- %(max_fields)s fields named (those most records held, then by name), the rest counted together under %(other)s.
UPDATE crawler_ops.crawl_run
   SET fetched = fetched + %(fetched)s, kept = kept + %(kept)s, published = published + %(published)s,
       expired = expired + %(expired)s, dead_lettered = dead_lettered + %(dead_lettered)s, pages = pages + %(pages)s,
       expiry_cutoff = GREATEST(expiry_cutoff, %(cutoff)s),
       drift_sampled = drift_sampled + %(drift_sampled)s,
       drift_profile = CASE WHEN %(drift_sampled)s = 0 THEN drift_profile ELSE (
           SELECT coalesce(jsonb_object_agg(name, types), '{}'::jsonb)
             FROM (SELECT name, jsonb_object_agg(kind, n) AS types
                     FROM (SELECT CASE WHEN place <= %(max_fields)s THEN name ELSE %(other)s END AS name, kind,
                                  sum(n) AS n
                             FROM (SELECT name, kind, n,
                                          dense_rank() OVER (ORDER BY name = %(other)s, held DESC,
                                                                      name COLLATE "C") AS place
                                     FROM (SELECT name, kind, n, sum(n) OVER (PARTITION BY name) AS held
                                             FROM (SELECT f.key AS name, t.key AS kind, sum(t.value::bigint) AS n
                                                     FROM (SELECT key, value FROM jsonb_each(drift_profile)
                                                           UNION ALL
                                                           SELECT key, value
                                                             FROM jsonb_each(%(drift_fields)s::jsonb)) AS f,
                                                          jsonb_each(f.value) AS t
                                                    GROUP BY f.key, t.key) AS counted) AS held) AS placed
                            GROUP BY 1, 2) AS folded
                    GROUP BY name) AS merged)
       END
 WHERE task_id = %(task)s AND run_id = %(run_id)s
RETURNING expiry_cutoff
