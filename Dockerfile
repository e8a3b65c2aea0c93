# The Airflow image crawler_ops runs in: the official image of the pinned Airflow release, the runtime requirements
# installed under constraints.txt (the exact versions the tests ran with, so a rebuild gets the same packages), and
# the code (DAGs, plugins, include/ with the SQL, the sample config and the deploy scripts). Every Airflow service of
# docker-compose.yaml runs this one image; docker-compose.dev.yaml mounts a working tree over the code for development.
FROM apache/airflow:3.3.2-python3.11

COPY requirements.txt constraints.txt /opt/crawler-ops/
# Pinning apache-airflow to the image's own version keeps pip from moving Airflow while it installs the rest.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /opt/crawler-ops/requirements.txt \
      -c /opt/crawler-ops/constraints.txt

COPY --chown=airflow:root dags/ /opt/airflow/dags/
COPY --chown=airflow:root plugins/ /opt/airflow/plugins/
COPY --chown=airflow:root include/ /opt/airflow/include/
ENV CRAWLER_OPS_CONFIG=/opt/airflow/include/crawler_tasks.yaml
# The `crawler-ops` command (status, validate, schema, ...), running the code in /opt/airflow/plugins.
COPY --chown=airflow:root pyproject.toml /opt/airflow/pyproject.toml
RUN pip install --no-cache-dir --no-deps -e /opt/airflow
