-- The token row of a source connection, empty until the first worker that needs a token fills it.
INSERT INTO crawler_ops.source_token (source) VALUES (%(source)s)
ON CONFLICT (source) DO NOTHING
