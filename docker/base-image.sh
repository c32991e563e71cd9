#!/usr/bin/env bash
# The Dockerfile's base image, made from Debian's packages with debootstrap, for machines that cannot pull
# from a public image registry (docs/docker.md, "The base image"):
#
#   docker/base-image.sh            makes isrsim-base:bookworm unless the engine has it
#   docker/base-image.sh --force    makes it again
#
# Debian bookworm (minbase) with python3, python3-venv and ca-certificates. The host's extra CA
# certificates (those update-ca-certificates knows, in /usr/local/share/ca-certificates) are added, and
# pip is told to use the system's bundle, so pip inside the build reaches its index through the same
# TLS-inspecting proxy the host uses; the host's pip index settings (PIP_INDEX_URL, pip.conf) go along.
# As Debian's slim images, it drops documentation, manual pages and locales, now and for every package
# a later stage installs (dpkg path-exclude).
#
# The root file system is cached as a tarball (ISRSIM_BASE_CACHE, /var/cache/isrsim by default) under a
# name made from this script and the certificates, so a second run on the same machine takes seconds.
set -euo pipefail

IMAGE="${ISRSIM_BASE_IMAGE:-isrsim-base:bookworm}"
SUITE=bookworm
MIRROR="${ISRSIM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${ISRSIM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
CACHE="${ISRSIM_BASE_CACHE:-/var/cache/isrsim}"
PACKAGES=python3,python3-venv,ca-certificates
HOST_CERTS=/usr/local/share/ca-certificates

say() { echo "base-image: $*" >&2; }

if [[ "${1:-}" != "--force" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE is there"
  exit 0
fi

# The cache key: this recipe and the certificates it adds.
key="$( { cat "$0"; find "$HOST_CERTS" -type f -name '*.crt' -print0 2>/dev/null | sort -z | xargs -0r cat; } \
  | sha256sum | cut -c1-16)"
tarball="$CACHE/isrsim-base-$SUITE-$key.tar"

if [[ ! -s "$tarball" ]]; then
  command -v debootstrap >/dev/null 2>&1 || { say "debootstrap is missing: apt-get install debootstrap"; exit 1; }
  root="$(mktemp -d "${TMPDIR:-/var/tmp}/isrsim-base.XXXXXX")"
  cleanup() {
    # debootstrap mounts /proc and /sys in the new root while it works: unmount whatever is left there
    # before deleting, and never cross into another file system.
    grep -o " $root/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf --one-file-system "$root" "$root.log"
  }
  trap cleanup EXIT
  say "debootstrap $SUITE ($PACKAGES) from $MIRROR into $root"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 || {
    tail -n 30 "$root.log" >&2
    exit 1
  }
  rm -f "$root.log"

  cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
  # As Debian's slim images: no documentation, manual pages or locales, now or later.
  cat >"$root/etc/dpkg/dpkg.cfg.d/isrsim-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
  cat >"$root/etc/apt/apt.conf.d/isrsim-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
  rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true

  # The host's extra CA certificates, into the image's bundle.
  if compgen -G "$HOST_CERTS/*.crt" >/dev/null; then
    say "adding the host's CA certificates: $(cd "$HOST_CERTS" && echo *.crt)"
    cp "$HOST_CERTS"/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  # pip: the system's bundle (which has those certificates), and the host's index if it names one (its
  # network indexes only: a file:// index on the host is not in the image).
  pip_setting() {  # the environment's value, else pip.conf's; without file:// entries
    local value="${!1:-$(python3 -m pip config get "global.$2" 2>/dev/null || true)}"
    tr -s ' \n' '\n\n' <<<"$value" | grep -v '^file:' | grep -v '^$' | paste -sd ' ' - || true
  }
  {
    echo "[global]"
    echo "cert = /etc/ssl/certs/ca-certificates.crt"
    local_index="$(pip_setting PIP_INDEX_URL index-url)"
    [[ -z "$local_index" ]] || echo "index-url = $local_index"
    extra="$(pip_setting PIP_EXTRA_INDEX_URL extra-index-url)"
    [[ -z "$extra" ]] || echo "extra-index-url = $extra"
    trusted="$(pip_setting PIP_TRUSTED_HOST trusted-host)"
    [[ -z "$trusted" ]] || echo "trusted-host = $trusted"
  } >"$root/etc/pip.conf"

  rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/*
  mkdir -p "$CACHE"
  tar --numeric-owner --one-file-system -C "$root" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  # Older tarballs of this recipe are of no more use.
  find "$CACHE" -maxdepth 1 -name "isrsim-base-$SUITE-*.tar" -not -name "$(basename "$tarball")" -delete
  say "cached the root file system in $tarball ($(du -h "$tarball" | cut -f1))"
fi

say "importing $tarball as $IMAGE"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  "$tarball" "$IMAGE" >/dev/null
say "$IMAGE: $(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')"
