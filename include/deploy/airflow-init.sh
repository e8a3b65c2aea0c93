#!/usr/bin/env bash
# airflow-init: check the settings, wait for the metadata DB (failing after DB_WAIT_S seconds with its last error),
# migrate it, import connections and pools, create the source pools, and hand the logs volume to the Airflow user.
set -euo pipefail
missing=()
for name in AIRFLOW__CORE__FERNET_KEY AIRFLOW__API_AUTH__JWT_SECRET AIRFLOW__API__SECRET_KEY CRAWLER_DB_PASSWORD \
  CRAWLER_DB_HOST KAFKA_BOOTSTRAP_SERVERS SOURCE_HOST SCHEMA_REGISTRY_URL; do
  [ -n "${!name:-}" ] || missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "airflow-init: required settings missing: ${missing[*]}; set them in .env (python3 include/deploy/make_env.py)" >&2
  exit 1
fi

deadline=$((SECONDS + ${DB_WAIT_S:-120}))
until error=$(airflow db check 2>&1); do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "airflow-init: the metadata database did not answer within ${DB_WAIT_S:-120} s; last error:" >&2
    echo "$error" | tail -n 5 >&2
    exit 1
  fi
  echo "airflow-init: waiting for the metadata database"
  sleep 3
done

airflow db migrate
rendered=$(mktemp --suffix=.json)
python - "$rendered" <<'PY'
import os, re, sys
text = open("/opt/airflow/include/deploy/connections.json", encoding="utf-8").read()
unset = sorted(set(re.findall(r"\$\{(\w+)\}", text)) - set(os.environ))
if unset:
    sys.exit(f"airflow-init: connections.json needs {', '.join(unset)}; set them in .env")
open(sys.argv[1], "w", encoding="utf-8").write(os.path.expandvars(text))
PY
airflow connections import --overwrite "$rendered"
rm -f "$rendered"
airflow pools import /opt/airflow/include/deploy/pools.json
# The source connections' pools (source.max_in_flight slots each), created or resized to the config.
crawler-ops pools --apply
# This script runs as root (to do this): files it or an earlier version left in the logs volume go to the Airflow user.
chown -R "${AIRFLOW_UID:-50000}:0" /opt/airflow/logs
echo "airflow-init: done"
