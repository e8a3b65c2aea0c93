-- The source answered 429 or sent Retry-After: every worker waits retry_after_s (no slot before now + it), and the
-- shared rate is halved (not below floor) unless it was halved less than cut_every_s ago: the answers to the
-- requests already in flight belong to that same congestion signal. The rate grows back only once the wait is
-- over (rate_at). Returns the new rate and whether it was cut. The wait is clamped to [0, max_pause_s] here too (NaN
-- counts as max_pause_s), and a row stored further than max_ahead_s ahead is pulled back (see take.sql).
WITH cur AS (
    SELECT s.source, s.rate, s.rate_at, s.cut_at,
           coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision) AS t
    FROM crawler_ops.source_rate AS s
    WHERE s.source = %(source)s
    FOR UPDATE
), grown AS (
    SELECT source, t, t - cut_at >= %(cut_every_s)s AS cut,
           t + least(greatest(coalesce(%(retry_after_s)s::double precision, 0), 0), %(max_pause_s)s::double precision)
               AS paused_until,
           t + %(max_ahead_s)s::double precision AS furthest,
           least(%(ceiling)s::double precision,
                 rate + %(ceiling)s::double precision / %(recovery_s)s * greatest(0, t - rate_at)) AS rate
    FROM cur
)
UPDATE crawler_ops.source_rate AS s
SET rate = CASE WHEN g.cut THEN greatest(least(%(floor)s::double precision, %(ceiling)s), g.rate / 2) ELSE g.rate END,
    rate_at = greatest(least(s.rate_at, g.furthest), g.paused_until),
    cut_at = CASE WHEN g.cut THEN g.t ELSE s.cut_at END,
    next_slot = greatest(least(s.next_slot, g.furthest), g.paused_until),
    throttles = s.throttles + 1,
    updated_at = now()
FROM grown AS g
WHERE s.source = g.source
RETURNING s.rate, g.cut
