-- The shared access token of a source connection and the seconds it stays valid (negative: expired), without a lock.
SELECT access_token, extract(epoch FROM expires_at - clock_timestamp())::double precision AS left_s
FROM crawler_ops.source_token
WHERE source = %(source)s
