"""The crawl benchmark's parts, by concern (``bench/crawl_bench.py`` runs them in order):

- ``common``: reference time, window, limits, result folder, :class:`BenchError`;
- ``environment``: the running stack through ``dev/stack.py``, the project's producer settings, Airflow
  homes on private copies of the metadata DB;
- ``source``: demo-source data sets, ground truth, request log, page reads;
- ``topics``: fresh Kafka topics, a counting producer, a topic's keys checked against the truth;
- ``limits``: source drain, sink limit, the source with the project's pages in flight, per-page costs;
- ``old_algorithm``: the old service's first crawl, reimplemented;
- ``sampling``: a monitored subprocess (wall, CPU, polled RSS of its tree), per-process peak RSS;
- ``timeline``: phases of a ``dags test`` run from Airflow's own log lines;
- ``metadata``: reads of the Airflow metadata DB: task instances, the chunks' return values (XCom);
- ``project``: the crawl DAG under ``airflow dags test``;
- ``profile``: a ``dags test`` under py-spy and the top of the chunk's profile;
- ``scheduler``: the crawl DAG on a real scheduler with LocalExecutor;
- ``results``: the measured variants and suites;
- ``report``: markdown and JSON.

``bench/chaos.py`` (failures injected through a private scheduler) uses the chaos lab, the ``chaos`` package.
"""
