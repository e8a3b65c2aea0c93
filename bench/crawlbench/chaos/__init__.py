"""The chaos lab of ``bench/chaos.py``: failures injected through a private scheduler. :mod:`.run` runs one private
Airflow and the scenarios in turn (:mod:`.scenarios`); :mod:`.faults` injects them; :mod:`.lab` and
:mod:`.targets` hold the private PostgreSQL and Kafka; :mod:`.flights` the task shapes; :mod:`.on_airflow` the
private Airflow's processes; :mod:`.count` counts what the topics hold against the source; :mod:`.report` prints and
writes the results."""
