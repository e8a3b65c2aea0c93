#!/usr/bin/env bash
# Puts the values.schema.json of Apache Airflow's official Helm chart, the version include/deploy/helm/values.yaml
# names, at dev/helm/values.schema.json, where tests/dev/test_helm_values.py checks every key of the values file
# against it (the test is skipped while the file is missing). From the chart's package:
#
#   dev/helm/chart_schema.sh                      # helm pull apache-airflow/airflow --version 1.22.0 (needs helm)
#   dev/helm/chart_schema.sh airflow-1.22.0.tgz   # a package already downloaded
#
# The file is not committed (.gitignore): it is the chart's, fetched from its release, and the check is only as
# good as the schema being the released one, which the version check below makes sure of.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(sed -nE 's/^# crawler_ops on .* chart, version ([0-9.]+).*/\1/p' "$HERE/../../include/deploy/helm/values.yaml")"
[ -n "$VERSION" ] || { echo "no chart version in include/deploy/helm/values.yaml's header" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ $# -ge 1 ]; then
  package=$1
else
  helm repo add apache-airflow https://airflow.apache.org >/dev/null
  helm pull apache-airflow/airflow --version "$VERSION" --destination "$work"
  package="$work/airflow-$VERSION.tgz"
fi
tar -xzf "$package" -C "$work" airflow/Chart.yaml airflow/values.schema.json
found=$(sed -nE 's/^version: *//p' "$work/airflow/Chart.yaml")
[ "$found" = "$VERSION" ] || { echo "the package is chart $found, values.yaml names $VERSION" >&2; exit 1; }
cp "$work/airflow/values.schema.json" "$HERE/values.schema.json"
echo "dev/helm/values.schema.json: chart $VERSION ($(sha256sum "$HERE/values.schema.json" | cut -c1-16))"
