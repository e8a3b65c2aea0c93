"""Config -> DAG objects, one builder module per DAG kind: :mod:`.crawl` (``crawl_<id>``), :mod:`.executor`
(``exec_<name>``), :mod:`.maintenance` (``crawler_ops_maintenance``) and :mod:`.gauges` (``crawler_ops_gauges``);
:mod:`.common` holds what they share, :mod:`.shards` which DAG file builds which tasks.

No network or database access here: this runs at parse time. When a task process starts, only its own
DAG is built (``get_parsing_context``). An invalid task becomes a small DAG whose only task fails with
the validation message, so it is visible in the UI instead of silently missing. Each DAG file imports its builder
module directly, so it does not pay for importing the others.
"""
