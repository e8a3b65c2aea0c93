-- Is there a unique index on exactly (id, task_name)? ON CONFLICT (id, task_name) needs one.
SELECT 1
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %s AND c.relname = %s AND i.indisunique
   AND (SELECT array_agg(lower(a.attname::text) ORDER BY a.attname::text)
          FROM pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey)) = ARRAY['id', 'task_name']
