#!/usr/bin/env bash
# What the JavaScript and Go client tests need, installed when missing and kept in a cache directory outside
# the clone (ISRSIM_SUITES_CACHE, default ~/.cache/isrsim):
#   Go: golang-go and Debian's Sarama source (golang-github-shopify-sarama-dev), the test client built in
#       GOPATH mode into $CACHE/go/sarama-client;
#   JavaScript: node and npm (Debian), KafkaJS from npm into $CACHE/kafkajs-<version>.
# Prints the lines SARAMA_CLIENT=... and KAFKAJS_NODE_PATH=... .
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${ISRSIM_SUITES_CACHE:-$HOME/.cache/isrsim}"
KAFKAJS_VERSION="${KAFKAJS_VERSION:-2.2.4}"
SARAMA_SRC=/usr/share/gocode/src/github.com/Shopify/sarama

missing=()
command -v go >/dev/null || missing+=(golang-go)
[[ -d "$SARAMA_SRC" ]] || missing+=(golang-github-shopify-sarama-dev)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "installing ${missing[*]} (apt-get install)" >&2
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

GO_DIR="$CACHE/go"
SRC="$ROOT/tests/clients/programs/sarama/main.go"
if [[ ! -x "$GO_DIR/sarama-client" || "$SRC" -nt "$GO_DIR/sarama-client" ]]; then
  mkdir -p "$GO_DIR"
  start=$SECONDS
  GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$GO_DIR/cache" \
    go build -o "$GO_DIR/sarama-client" "$SRC" 2> >(grep -v -e zstd -e cgo-gcc-prolog -e deprecated -e '^ ' -e '^In file' >&2)
  echo "built sarama-client in $((SECONDS - start)) s" >&2
fi

JS_DIR="$CACHE/kafkajs-$KAFKAJS_VERSION"
if [[ ! -f "$JS_DIR/node_modules/kafkajs/package.json" ]]; then
  mkdir -p "$JS_DIR"
  npm install --silent --no-audit --no-fund --prefix "$JS_DIR" "kafkajs@$KAFKAJS_VERSION" >&2
fi
echo "SARAMA_CLIENT=$GO_DIR/sarama-client"
echo "KAFKAJS_NODE_PATH=$JS_DIR/node_modules"
