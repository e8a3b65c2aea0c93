SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s AND table_name = %s
