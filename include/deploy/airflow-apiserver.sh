#!/usr/bin/env bash
# airflow-apiserver: the simple auth manager reads its users' passwords from a file when the api-server starts;
# write it from AIRFLOW_ADMIN_USER / AIRFLOW_ADMIN_PASSWORD (readable by this user only), then run the api-server.
set -euo pipefail
: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD in .env (python3 include/deploy/make_env.py)}"
file=${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?}
umask 077
python - "$file" <<'PY'
import json, os, sys
json.dump({os.environ.get("AIRFLOW_ADMIN_USER") or "admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, open(sys.argv[1], "w"))
PY
exec airflow api-server "$@"
