"""The steps of a crawl DAG run, in the order they run.

- :mod:`.run`: who is running: the task config, the Airflow run, the reference time and the trigger params;
- :mod:`.plan`: ask the source for its total, plan the batches from the watermark up, newest first, in chunks;
- :mod:`.chunk`: one mapped task per chunk: fetch each page, filter it, publish the kept records to Kafka;
- :mod:`.batch_filter`: a fetched page filtered into its batch's messages and dead letters (nothing produced);
- :mod:`.ledger`: the batch claims and done marks of a chunk (the status table of batches);
- :mod:`.commit`: move the watermark up to the oldest batch not done and record the run's summary.
"""
