#!/usr/bin/env bash
# Builds librdkafka's test-runner once, from the librdkafka source that node-rdkafka's npm tarball carries
# (deps/librdkafka), into a cache directory outside the clone; reused when present.
#   scripts/client_suites/librdkafka_build.sh      prints the tests/ directory holding test-runner
# ISRSIM_SUITES_CACHE (default ~/.cache/isrsim) holds it; NODE_RDKAFKA_VERSION picks the tarball.
set -euo pipefail
VERSION="${NODE_RDKAFKA_VERSION:-3.6.1}"
CACHE="${ISRSIM_SUITES_CACHE:-$HOME/.cache/isrsim}"
DIR="$CACHE/librdkafka-node-rdkafka-$VERSION"
SRC="$DIR/package/deps/librdkafka"
if [[ -x "$SRC/tests/test-runner" && -f "$DIR/.built" ]]; then
  echo "$SRC/tests"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is missing: apt-get install npm" >&2; exit 1; }
start=$SECONDS
rm -rf "$DIR" && mkdir -p "$DIR"
(cd "$DIR" && npm pack --silent "node-rdkafka@$VERSION" >&2 && tar xzf "node-rdkafka-$VERSION.tgz" package/deps/librdkafka)
{
  cd "$SRC"
  # No --install-deps: the machine's own libraries (what configure finds) are used, nothing is downloaded.
  ./configure --disable-gssapi >"$DIR/configure.log" 2>&1
  make -j"$(nproc)" libs >"$DIR/build.log" 2>&1
  make -C tests -j"$(nproc)" test-runner >>"$DIR/build.log" 2>&1
} || { echo "librdkafka build failed: see $DIR/configure.log and $DIR/build.log" >&2; exit 1; }
echo "built librdkafka's test-runner in $((SECONDS - start)) s" >&2
echo "$((SECONDS - start))" >"$DIR/.built"
echo "$SRC/tests"
