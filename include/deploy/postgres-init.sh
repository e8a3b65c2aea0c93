#!/usr/bin/env bash
# Runs once, when the PostgreSQL volume is new: the crawler's own database and user next to Airflow's.
set -euo pipefail
: "${CRAWLER_DB_PASSWORD:?set CRAWLER_DB_PASSWORD in .env (see .env.example)}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v password="$CRAWLER_DB_PASSWORD" <<'SQL'
CREATE USER crawler WITH PASSWORD :'password';
CREATE DATABASE crawler OWNER crawler;
SQL
