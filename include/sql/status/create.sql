-- A status table in the old executor's layout plus crawler_ops' columns (idempotent).
-- {table} is a quoted identifier; the time columns are timestamptz (an existing table may use INT epochs).
CREATE TABLE IF NOT EXISTS {table} (
    id          bigint NOT NULL,
    status      integer NOT NULL DEFAULT 0,
    start_time  timestamptz,
    end_time    timestamptz,
    task_name   varchar(100) NOT NULL,
    attempts    integer NOT NULL DEFAULT 0,
    last_error  text,
    claim_token text,
    seq         bigint,
    UNIQUE (id, task_name)
)
