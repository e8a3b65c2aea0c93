"""What operators use around the crawls: the status view and its web app, the gauges, the source pools, the run
listener and the maintenance DAG's pruning."""
