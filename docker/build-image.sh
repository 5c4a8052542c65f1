#!/usr/bin/env bash
# Build the one sweeps image (Dockerfile) that every service of docker-compose.yml runs.
#   SWEEPS_IMAGE       tag to build (sweeps:latest)
#   SWEEPS_BASE_IMAGE  BASE_IMAGE build arg (python:3.11-slim; CI: docker/build-base.sh's image)
#   SWEEPS_WHEELHOUSE  a folder kept between builds: when set, the host fills it with
#                      `pip download` (its own pip config, so local mirrors count) and the build
#                      installs from it alone, served on 127.0.0.1 to a host-network build, so
#                      the ~3 GB of torch/CUDA wheels are neither downloaded again nor sent as
#                      build context. Unset: pip inside the build uses the package index.
# Always builds: Docker's layer cache keeps the dependency layer (it depends on pyproject.toml
# only), so a source change costs seconds and the image never lags behind the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${SWEEPS_IMAGE:-sweeps:latest}
BASE=${SWEEPS_BASE_IMAGE:-python:3.11-slim}
PY=${PYTHON:-python3}
now() { date +%s; }

args=(--build-arg "BASE_IMAGE=$BASE" -t "$IMAGE")
if [ -n "${SWEEPS_WHEELHOUSE:-}" ]; then
  mkdir -p "$SWEEPS_WHEELHOUSE"
  t0=$(now)
  reqs="$("$PY" docker/deps.py pyproject.toml team)
$(sha256sum constraints.txt)"
  # Filled once per set of requirements (a resolution against the index takes minutes even
  # when every file is already there); a changed pyproject.toml adds what it needs.
  stamp="$SWEEPS_WHEELHOUSE/.requirements"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$reqs" ]; then
    log=$(mktemp)
    "$PY" -m pip download -q -d "$SWEEPS_WHEELHOUSE" -c constraints.txt \
      -r <("$PY" docker/deps.py pyproject.toml team) pip >"$log" 2>&1 \
      || { tail -n 40 "$log"; exit 1; }
    echo "$reqs" >"$stamp"
  fi
  echo "wheelhouse: $SWEEPS_WHEELHOUSE ($(du -sh "$SWEEPS_WHEELHOUSE" | cut -f1), $(($(now) - t0)) s)"
  # A fixed port: the build args are part of the layer cache key.
  port=${SWEEPS_WHEELHOUSE_PORT:-38765}
  "$PY" -m http.server -b 127.0.0.1 -d "$SWEEPS_WHEELHOUSE" "$port" >/dev/null 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 50); do
    "$PY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/', timeout=1)" \
      2>/dev/null && break
    kill -0 "$server" 2>/dev/null || { echo "wheelhouse: port $port is taken" >&2; exit 1; }
    sleep 0.2
  done
  args+=(--network host --build-arg PIP_NO_INDEX=1
    --build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/")
fi
t0=$(now)
log=$(mktemp)
# The legacy builder: Debian's docker.io ships no buildx, and the Dockerfile needs no BuildKit.
DOCKER_BUILDKIT=0 docker build "${args[@]}" . >"$log" 2>&1 || { tail -n 40 "$log"; exit 1; }
rm -f "$log"
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "image: $IMAGE built from $BASE in $(($(now) - t0)) s, $((size / 1000000)) MB"
