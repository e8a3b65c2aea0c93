"""What a crawl tells the outside: metrics (Airflow's StatsD/OpenTelemetry), the run webhook and its signature."""
