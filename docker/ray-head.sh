#!/bin/sh
# The Ray head of the team stack: token auth on, the token generated once on the ray-auth volume
# (RAY_AUTH_TOKEN_PATH) where workers and clients read it; the Jobs API and dashboard on 8265.
# No CPUs for tasks: trials run on the ray-worker containers only; job drivers need none.
set -eu
token=${RAY_AUTH_TOKEN_PATH:?}
if [ ! -s "$token" ]; then
  (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32), end="")' >"$token.new")
  mv "$token.new" "$token"
fi
exec ray start --head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port=8265 \
  --num-cpus=0 --num-gpus=0 --disable-usage-stats --block "$@"
