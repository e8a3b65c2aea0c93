-- Take the token row of a source connection until the transaction ends (a worker renewing the token), and read it
-- again: another worker may have renewed it while this one waited for the lock.
SELECT access_token, extract(epoch FROM expires_at - clock_timestamp())::double precision AS left_s,
       refresh_token, seed
FROM crawler_ops.source_token
WHERE source = %(source)s
FOR UPDATE
