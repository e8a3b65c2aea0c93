#!/usr/bin/env bash
# A real Docker engine for `make compose-test`, on a machine that reaches no image registry:
#
#   dev/compose/engine.sh up       dockerd (Debian's docker.io) with its own data root, Compose v2 (built from Go
#                                   modules when missing), a debootstrap base image and the stand-in images
#   dev/compose/engine.sh env      prints `export DOCKER_HOST=...` for a shell that wants to use the engine
#   dev/compose/engine.sh down     stops the dockerd this script started (images and layers stay cached)
#
# Everything lives outside the clone (CRAWLER_OPS_DOCKER_ROOT, default /var/lib/crawler-ops-docker): the engine's
# data root (image layers, so a second run reuses them), the Compose binary, the Kafka jars. The stand-in images
# (dev/compose/images/*) carry the exact names and tags docker-compose.yaml and Dockerfile use, and a label with the
# hash of the files they are built from: an image whose label matches is not rebuilt, a changed file rebuilds it.
# They are test fixtures: each honours the documented contract of the image it replaces as far as the compose file
# relies on it, and none of them is ever pushed or shipped.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
ROOT="${CRAWLER_OPS_DOCKER_ROOT:-/var/lib/crawler-ops-docker}"
RUN_DIR="${CRAWLER_OPS_DOCKER_RUN:-/var/run/crawler-ops-docker}"
SOCK="$RUN_DIR/docker.sock"
COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
CLI_PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
export DOCKER_HOST="unix://$SOCK"

# The image names and tags that docker-compose.yaml and Dockerfile name; test_deploy.py checks they stay in step.
AIRFLOW_BASE_IMAGE="apache/airflow:3.3.2-python3.11"
POSTGRES_IMAGE="postgres:18"
REDIS_IMAGE="redis:7.2-bookworm"
KAFKA_IMAGE="apache/kafka:4.4.0"
PYTHON_IMAGE="python:3.11-slim"  # dev/demo_source/Dockerfile's base
REGISTRY_IMAGE="apicurio/apicurio-registry-mem:2.4.2.Final"
BASE_IMAGE="crawler-ops-test/debian:bookworm"

log() { printf '%s engine: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root: dockerd, apt-get and debootstrap need it"; }

apt_install() {  # apt_install <command> <package>: the Debian package when the command is missing
  command -v "$1" >/dev/null && return 0
  log "installing Debian's $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$2" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$2" >/dev/null; }
  command -v "$1" >/dev/null || die "apt-get install $2 did not bring $1"
}

engine_up() {
  if docker info >/dev/null 2>&1; then return 0; fi
  apt_install dockerd docker.io
  command -v docker >/dev/null || apt_install docker docker.io
  mkdir -p "$ROOT/data" "$RUN_DIR"
  log "starting dockerd (data root $ROOT/data, socket $SOCK)"
  # Its own data root, exec root, pid file and socket: nothing of a system dockerd is touched or needed.
  nohup dockerd --data-root "$ROOT/data" --exec-root "$RUN_DIR/exec" --pidfile "$RUN_DIR/docker.pid" \
    --host "$DOCKER_HOST" --storage-driver overlay2 >"$ROOT/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 1
  done
  tail -n 30 "$ROOT/dockerd.log" >&2
  die "dockerd did not answer on $SOCK within 60 s (log: $ROOT/dockerd.log)"
}

engine_down() {
  if [ -f "$RUN_DIR/docker.pid" ]; then
    pid=$(cat "$RUN_DIR/docker.pid")
    log "stopping dockerd $pid"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
    die "dockerd $pid did not stop"
  fi
}

compose_up() {
  # Compose v2 is not packaged for Debian 12; it builds from its Go module (about 3 minutes, once per machine).
  # `go install module@version` refuses the module for its exclude directives, so it builds from a wrapper module.
  local cached="$ROOT/compose/docker-compose-$COMPOSE_VERSION"
  if [ ! -x "$cached" ]; then
    command -v go >/dev/null || die "Go is needed to build Compose $COMPOSE_VERSION (or put docker-compose in $CLI_PLUGINS)"
    log "building Compose $COMPOSE_VERSION from Go modules (about 3 minutes)"
    local work
    work=$(mktemp -d)
    (cd "$work" && go mod init compose-build >/dev/null 2>&1 \
      && go get "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION" >/dev/null 2>&1 \
      && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
        -o "$work/docker-compose" github.com/docker/compose/v2/cmd) || die "building Compose failed (in $work)"
    mkdir -p "$ROOT/compose"
    mv "$work/docker-compose" "$cached"
    rm -rf "$work"
  fi
  mkdir -p "$CLI_PLUGINS"
  cmp -s "$cached" "$CLI_PLUGINS/docker-compose" 2>/dev/null || cp "$cached" "$CLI_PLUGINS/docker-compose"
  docker compose version >/dev/null || die "docker compose does not answer"
}

# The hash of the files an image is built from (paths and contents), and of anything else passed.
files_key() {
  (cd "$REPO" && for f in "$@"; do
    if [ -e "$f" ]; then find "$f" -type f -print0 | sort -z | xargs -0 sha256sum; else echo "$f"; fi
  done) | sha256sum | cut -c1-16
}

image_key() { docker image inspect -f '{{ index .Config.Labels "crawler-ops.key" }}' "$1" 2>/dev/null || true; }

base_image() {
  local key
  key=$(files_key "bookworm-minbase-v1")
  [ "$(image_key "$BASE_IMAGE")" = "$key" ] && return 0
  apt_install debootstrap debootstrap
  # The Debian mirror apt uses on this machine: the only package source that is reachable.
  local mirror
  mirror=$(grep -rhoE '^(deb|URIs:)[^#]*https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
    | grep -oE 'https?://[^ ]+/debian/?$' | head -n1 || true)
  [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list*"
  log "debootstrap bookworm from $mirror (about 30 s)"
  local rootfs
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$ROOT/debootstrap.log" 2>&1 \
    || { tail -n 20 "$ROOT/debootstrap.log" >&2; rm -rf "$rootfs"; die "debootstrap failed"; }
  # Containers reach the same mirror; the CA bundle lets pip and Maven talk TLS through this machine's setup.
  cp /etc/apt/sources.list "$rootfs/etc/apt/sources.list" 2>/dev/null || true
  cp -r /etc/apt/sources.list.d/. "$rootfs/etc/apt/sources.list.d/" 2>/dev/null || true
  mkdir -p "$rootfs/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
  tar -C "$rootfs" -c . | docker import -c "LABEL crawler-ops.key=$key" -c 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
}

kafka_jars() {
  # The broker's jars from Maven Central, fetched on the host (Maven and Java are the dev stack's prerequisites)
  # into a folder outside the clone, then copied into the Kafka stand-in's build context.
  local out="$ROOT/kafka-lib/$(files_key dev/compose/images/kafka/pom.xml)"
  if [ ! -f "$out/.complete" ]; then
    command -v mvn >/dev/null || apt_install mvn maven
    log "fetching the Kafka jars from Maven Central"
    rm -rf "$out" && mkdir -p "$out"
    mvn -q -B -f "$HERE/images/kafka/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$out" >"$ROOT/kafka-mvn.log" 2>&1 || { tail -n 30 "$ROOT/kafka-mvn.log" >&2; die "mvn failed"; }
    touch "$out/.complete"
  fi
  echo "$out"
}

registry_jar() {
  # The dev stack's Schema Registry (dev/registry: Apicurio from Maven Central), built on the host in a copy of its
  # folder into one outside the clone, keyed by its sources; the registry stand-in's build context gets the jar.
  local out="$ROOT/registry/$(files_key dev/registry/pom.xml dev/registry/src)"
  if [ ! -f "$out/registry-runner.jar" ]; then
    command -v mvn >/dev/null || apt_install mvn maven
    log "building the Schema Registry from Maven Central"
    local work
    work=$(mktemp -d)
    cp -r "$REPO/dev/registry/pom.xml" "$REPO/dev/registry/src" "$work/"
    mvn -q -B -f "$work/pom.xml" package >"$ROOT/registry-mvn.log" 2>&1 \
      || { tail -n 30 "$ROOT/registry-mvn.log" >&2; rm -rf "$work"; die "mvn failed (log: $ROOT/registry-mvn.log)"; }
    mkdir -p "$out"
    mv "$work/target/registry-runner.jar" "$out/registry-runner.jar"
    rm -rf "$work"
  fi
  echo "$out/registry-runner.jar"
}

build_image() {  # build_image <tag> <context folder> <key> [<file or folder>:<name in the context> ...]
  local tag=$1 src=$2 key=$3
  shift 3
  if [ "$(image_key "$tag")" = "$key" ]; then
    log "$tag is up to date ($key)"
    return 0
  fi
  log "building $tag ($key)"
  local ctx
  ctx=$(mktemp -d)
  cp -r "$src/." "$ctx/"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  for extra in "$@"; do cp -r "${extra%:*}" "$ctx/${extra##*:}"; done
  local started=$SECONDS
  local build_log="$ROOT/build-${tag//[:\/]/_}.log"
  DOCKER_BUILDKIT=0 docker build --label "crawler-ops.key=$key" --build-arg "BASE=$BASE_IMAGE" -t "$tag" "$ctx" \
    >"$build_log" 2>&1 || { rm -rf "$ctx"; tail -n 30 "$build_log" >&2; die "docker build $tag failed (log: $build_log)"; }
  rm -rf "$ctx"
  log "built $tag in $((SECONDS - started)) s"
}

images_up() {
  base_image
  local base_key
  base_key=$(image_key "$BASE_IMAGE")
  build_image "$POSTGRES_IMAGE" "$HERE/images/postgres" "$(files_key dev/compose/images/postgres "$base_key")"
  build_image "$REDIS_IMAGE" "$HERE/images/redis" "$(files_key dev/compose/images/redis "$base_key")"
  local jars
  jars=$(kafka_jars)
  build_image "$KAFKA_IMAGE" "$HERE/images/kafka" "$(files_key dev/compose/images/kafka "$base_key")" "$jars:libs"
  local jar
  jar=$(registry_jar)
  build_image "$REGISTRY_IMAGE" "$HERE/images/registry" "$(files_key dev/compose/images/registry "$jar" "$base_key")" \
    "$jar:registry-runner.jar"
  build_image "$PYTHON_IMAGE" "$HERE/images/python" "$(files_key dev/compose/images/python "$base_key")"
  build_image "$AIRFLOW_BASE_IMAGE" "$HERE/images/airflow" \
    "$(files_key dev/compose/images/airflow constraints.txt "$base_key")" "$REPO/constraints.txt:constraints.txt"
}

case "${1:-up}" in
  up)
    need_root
    engine_up
    compose_up
    images_up
    ;;
  engine) need_root; engine_up; compose_up ;;
  images) images_up ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  down) engine_down ;;
  *) die "usage: $0 up|engine|images|env|down" ;;
esac
