SELECT column_name FROM information_schema.columns WHERE table_schema = %(schema)s AND table_name = %(table)s
