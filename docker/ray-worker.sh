#!/bin/sh
# A Ray worker node of the team stack, joining ray-head with the shared token.
# CPU hosts: no GPUs. With docker-compose.gpu.yml (SWEEPS_GPU_WORKERS=1) every replica sees the
# host's GPUs and claims ONE of them, by an flock held for its lifetime on a volume the replicas
# share: Docker's `count: 1` would hand GPU 0 to every `--scale` replica, and a replica cannot
# learn its own index. A replica beyond the GPU count exits with a message.
set -eu
start() { exec ray start --address=ray-head:6379 --disable-usage-stats --block "$@"; }
if [ -z "${SWEEPS_GPU_WORKERS:-}" ]; then
  start --num-gpus=0 "$@"
fi
n=$(nvidia-smi -L | grep -c '^GPU ')
claims=${SWEEPS_GPU_CLAIMS:-/run/gpu-claims}
i=0
while [ "$i" -lt "$n" ]; do
  exec 9>"$claims/gpu$i.lock"
  if flock -n 9; then
    # nvidia-smi's numbering, so the index names the GPU it lists; fd 9 (the claim) stays open.
    export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$i
    echo "ray-worker: claimed GPU $i of $n"
    start --num-gpus=1 "$@"
  fi
  i=$((i + 1))
done
echo "ray-worker: all $n GPUs are claimed by other replicas; scale ray-worker to at most $n" >&2
exit 1
