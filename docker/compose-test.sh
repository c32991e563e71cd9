#!/usr/bin/env bash
# `make compose-test`: the compose files on a real engine, on a Debian machine that may have none
# (docs/docker.md, "How the compose files are tested"):
#   1. Debian's docker.io and debootstrap, and Compose v2 as a CLI plugin, when missing (docker/engine.sh)
#   2. dockerd, if none answers (stopped again at the end if this script started it)
#   3. the base image, from Debian's packages (docker/base-image.sh; cached between runs)
#   4. the images: isrsim:latest (runtime) and isrsim-report:latest, with their sizes checked
#   5. tests/integration/test_compose_engine.py, the plain and the secure variants
# Every container, network and volume of the test projects is removed at the end, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${BIN:-.venv/bin}"
# The most the images may weigh (docs/docker.md): the runtime and the report's.
RUNTIME_MAX_MB=256
REPORT_MAX_MB=1460

stamp() { date -u +%H:%M:%S; }
t0=$SECONDS
phase() { echo "=== compose-test $(stamp) (+$((SECONDS - t0))s): $* ==="; }

phase "engine and Compose"
docker/engine.sh install
started="$(docker/engine.sh start)"
cleanup() {
  status=$?
  phase "cleanup"
  for project in isrsim-test-plain isrsim-test-secure; do
    docker compose -p "$project" -f docker-compose.yml -f docker-compose.secure.yml \
      --profile tools --profile report down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  done
  if [[ "$started" == started ]]; then
    docker/engine.sh stop
  fi
  phase "done (exit $status)"
  exit "$status"
}
trap cleanup EXIT

phase "base image"
docker/base-image.sh

phase "images"
# Compose v2 builds with the engine's BuildKit; the controller's service builds the image every cluster
# service runs, the report's its own.
docker compose -f docker-compose.yml --profile report build controller-1 report
size_mb() { docker image inspect --format '{{.Size}}' "$1" | awk '{ printf "%d", $1 / 1e6 }'; }
runtime_mb="$(size_mb isrsim:latest)"
report_mb="$(size_mb isrsim-report:latest)"
echo "image sizes: isrsim:latest ${runtime_mb} MB (at most ${RUNTIME_MAX_MB}), isrsim-report:latest ${report_mb} MB (at most ${REPORT_MAX_MB})"
if ((runtime_mb > RUNTIME_MAX_MB || report_mb > REPORT_MAX_MB)); then
  echo "an image is larger than it may be" >&2
  exit 1
fi

phase "the compose clusters"
# The engine's clusters, and the same compose file run as local processes (that one needs no engine; it is
# here rather than in `make test` to hold that suite's time).
"$BIN/pytest" -q -s -p no:cacheprovider -m compose tests/integration/test_compose.py tests/integration/test_compose_engine.py
