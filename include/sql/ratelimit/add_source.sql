-- The pacing row of a source connection, created at its configured rate by the first worker that uses it.
INSERT INTO crawler_ops.source_rate (source, ceiling, rate, rate_at, next_slot)
SELECT %(source)s, %(ceiling)s, %(ceiling)s, t, t
FROM (SELECT extract(epoch FROM clock_timestamp())::double precision AS t) AS clock
ON CONFLICT (source) DO NOTHING
