-- The claimed rows' output fields, in the configured order (names in braces are quoted identifiers).
SELECT {columns} FROM {source} AS src WHERE src.{source_id} = ANY(%(ids)s) ORDER BY {order_by}
