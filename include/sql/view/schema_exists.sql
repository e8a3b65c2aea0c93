SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = 'crawler_ops' AND tablename = 'crawl_error'
