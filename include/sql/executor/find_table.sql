-- Tables matching a configured name: exact first, then case-insensitive (DDL written with unquoted upper case).
SELECT table_schema, table_name
  FROM information_schema.tables
 WHERE table_schema = %(schema)s AND lower(table_name) = lower(%(table)s)
 ORDER BY (table_name = %(table)s) DESC
