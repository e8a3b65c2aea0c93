-- The crawler_ops schema's comment, which names the version of schema.sql last applied (no row: no schema yet).
SELECT obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = 'crawler_ops'
