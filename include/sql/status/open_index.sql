-- Open rows (pending or claimed) of a task in claim order: claims scan these, not the done history.
CREATE INDEX IF NOT EXISTS {index} ON {table} (task_name, seq) WHERE status < 2
