-- Settle this process's permits of a source's requests in flight (crawler_ops.settle_flight in schema.sql).
SELECT crawler_ops.settle_flight(%(source)s, %(holder)s, %(cap)s, %(busy)s, %(wants)s, %(lease_s)s)
