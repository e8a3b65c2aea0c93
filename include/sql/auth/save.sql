-- A token the provider just issued, valid for lifetime_s from now on PostgreSQL's clock, with the refresh token to use
-- next (a rotated one, or the one used) and the seed it descends from; in the transaction that took the row.
UPDATE crawler_ops.source_token
SET access_token = %(access_token)s,
    expires_at = clock_timestamp() + make_interval(secs => %(lifetime_s)s),
    refresh_token = %(refresh_token)s,
    seed = %(seed)s,
    token_requests = token_requests + 1,
    updated_at = now()
WHERE source = %(source)s
