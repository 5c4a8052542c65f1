#!/usr/bin/env bash
# Local stand-ins for `python:3.11-slim` and `postgres:16`, built from Debian's packages, for hosts
# that reach no image registry (CI here). Users pull the upstream images instead.
#   $SWEEPS_BASE_IMAGE      (sweeps-local/python:3.11-bookworm) debootstrap minbase + python3.11,
#                           python3-venv and pip from apt, imported with `docker import`
#   $SWEEPS_POSTGRES_IMAGE  (sweeps-local/postgres:15) FROM that base, Debian's postgresql-15 and an
#                           entrypoint with the upstream image's env interface (docker/postgres/)
# Idempotent: an image whose tag exists is kept (FORCE=1 rebuilds). Needs root (debootstrap).
set -euo pipefail
cd "$(dirname "$0")"
BASE=${SWEEPS_BASE_IMAGE:-sweeps-local/python:3.11-bookworm}
PG=${SWEEPS_POSTGRES_IMAGE:-sweeps-local/postgres:15}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
have() { [ -z "${FORCE:-}" ] && docker image inspect "$1" >/dev/null 2>&1; }
now() { date +%s; }

if have "$BASE"; then
  echo "base: $BASE exists"
else
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  rootfs=$(mktemp -d /var/tmp/sweeps-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  t0=$(now)
  debootstrap --variant=minbase --include=python3.11,python3-venv,python3-pip,ca-certificates \
    bookworm "$rootfs" "$MIRROR" >/dev/null
  # Later `apt-get install` in images built FROM this one needs the suites, not the cached lists.
  cat >"$rootfs/etc/apt/sources.list" <<SRC
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SRC
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  t1=$(now)
  tar -C "$rootfs" -c . | docker import \
    -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$BASE" >/dev/null
  echo "base: $BASE built (debootstrap $((t1 - t0)) s, import $(($(now) - t1)) s)"
fi

if have "$PG"; then
  echo "postgres: $PG exists"
else
  t0=$(now)
  DOCKER_BUILDKIT=0 docker build -q --build-arg BASE_IMAGE="$BASE" -t "$PG" postgres >/dev/null
  echo "postgres: $PG built ($(($(now) - t0)) s)"
fi
