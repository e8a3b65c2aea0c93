-- One row per executor run: the quota its workers share (cycle_index) and how many rows they hold or
-- processed; the run's summary deletes it. Idempotent.
CREATE SCHEMA IF NOT EXISTS crawler_ops;
CREATE TABLE IF NOT EXISTS crawler_ops.executor_run (
    task_name  text NOT NULL,
    run_id     text NOT NULL,
    quota      integer NOT NULL,
    claimed    integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_name, run_id)
);
