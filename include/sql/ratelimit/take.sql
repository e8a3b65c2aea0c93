-- Reserve request slots of a source (one statement, so one round trip): the rate first grows back towards the
-- caller's ceiling (requests_per_s) by ceiling / recovery_s per second since rate_at (not before); slots then start at
-- next_slot (or now, never earlier: an idle source earns no burst) and lie 1/rate apart. At least one slot is
-- granted, more (up to want) only while they fall within horizon_s from now; none when the first lies further than
-- max_wait_s (the request's deadline) ahead: the caller fails its request, and learns from `first` how far it is.
-- next_slot and rate_at never lie further than max_ahead_s ahead (max_retry_after_s + deadline_s): a row stored
-- further ahead (by a version without the Retry-After cap) is pulled back, so it heals. %(now)s: NULL for
-- PostgreSQL's clock (tests pass a time).
WITH cur AS (
    SELECT s.source, s.rate, s.rate_at, s.next_slot,
           coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision) AS t
    FROM crawler_ops.source_rate AS s
    WHERE s.source = %(source)s
    FOR UPDATE
), grown AS (
    SELECT source, t,
           least(greatest(rate_at, t), t + %(max_ahead_s)s::double precision) AS rate_at,
           least(greatest(next_slot, t), t + %(max_ahead_s)s::double precision) AS first,
           least(%(ceiling)s::double precision,
                 rate + %(ceiling)s::double precision / %(recovery_s)s * greatest(0, t - rate_at)) AS rate
    FROM cur
), granted AS (
    SELECT source, t, rate_at, first, rate,
           CASE WHEN first - t > %(max_wait_s)s::double precision THEN 0
                ELSE greatest(1, least(%(want)s::double precision, floor((t + %(horizon_s)s - first) * rate) + 1))::integer
           END AS n
    FROM grown
)
UPDATE crawler_ops.source_rate AS s
SET ceiling = %(ceiling)s, rate = g.rate, rate_at = g.rate_at, next_slot = g.first + g.n / g.rate, updated_at = now()
FROM granted AS g
WHERE s.source = g.source
RETURNING g.t AS now, g.first, 1 / g.rate AS interval, g.n AS granted, g.rate
