-- Fresh statistics after sync queued or ranked many rows, so claims walk the open-rows index in rank order
-- (with stale statistics the planner may read and sort every open row on each claim).
ANALYZE {table}
