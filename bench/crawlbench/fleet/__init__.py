"""The fleet benchmark (``bench/fleet_bench.py``): many crawl tasks on one source connection, scheduled by a real
Airflow scheduler on a cron or started by watches of their source in Airflow's triggerer, with new records appended
while it runs. One module a concern:

- :mod:`.cpu`: CPU seconds of every process the benchmark started and their descendants, from their own accounting
- :mod:`.fleet`: the data sets, the config (its schedule and watch switched on and off) and the appends
- :mod:`.services`: the Airflow the fleet runs on (LocalExecutor or Celery), its REST API, the DAGs' and watches' states
- :mod:`.phase`: one phase: switched off and drained, a watched fleet's warm-up, the figures every phase has
- :mod:`.watch`: readings at a phase's bounds, change lag, and a watched fleet's polls, changes and CPU per poll
- :mod:`.machine`: the machine's CPU busy share from ``/proc/stat``
- :mod:`.sampler`: what is sampled every few seconds while the fleet runs (load, pools, runs, the process tree)
- :mod:`.runs`: the runs and task instances read from the metadata DB and the crawler's run records, as figures
- :mod:`.topics`: each task's topic against the source's truth, as far as the task has crawled
- :mod:`.report`: the targets, the markdown tables and the JSON
"""
