-- Nothing to add before the first settle of a source's permits; fails while the schema does not exist yet.
SELECT 1 FROM crawler_ops.source_flight LIMIT 0
