"""Triggers of Airflow's triggerer: a crawl task's source watched for new records (:mod:`.source_moved`)."""
