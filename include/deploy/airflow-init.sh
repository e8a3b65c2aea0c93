#!/usr/bin/env bash
# airflow-init: check the settings, migrate the metadata DB, create the admin user, import connections and pools,
# create the source pools.
set -euo pipefail
missing=()
for name in AIRFLOW_ADMIN_PASSWORD CRAWLER_DB_PASSWORD CRAWLER_DB_HOST KAFKA_BOOTSTRAP_SERVERS SOURCE_HOST; do
  [ -n "${!name:-}" ] || missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "airflow-init: required settings missing: ${missing[*]}; set them in .env (see .env.example)" >&2
  exit 1
fi
airflow db migrate
airflow users create --role Admin --username "${AIRFLOW_ADMIN_USER:-admin}" --password "$AIRFLOW_ADMIN_PASSWORD" \
  --firstname Airflow --lastname Admin --email admin@example.org || echo "airflow-init: admin user exists"
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
echo "airflow-init: done"
