#!/usr/bin/env bash
# One short GPU check (for a lent H100/H200; ~5 minutes): trainer throughput with bf16 autocast +
# channels_last vs a bare fp32 loop, and trials/hour with 1 lane vs 4 lanes packed on one GPU
# (gpus_per_worker 0.25). Output goes to stdout and bench/gpu-<date>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
out="bench/gpu-$(date +%Y%m%d).txt"
{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  "$PY" - <<'PYEOF'
import time, torch, torch.nn.functional as F
from trainer.models import build_model
dev = torch.device("cuda")
x = torch.randn(50_000, 3, 32, 32, device=dev); y = torch.randint(0, 10, (50_000,), device=dev)
def run(bf16, cl, steps=200, bs=256):
    torch.manual_seed(0)
    m = build_model("resnet", (3, 32, 32), 10, width=32, depth=2).to(dev)
    if cl: m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for i in range(steps + 20):
        if i == 20: torch.cuda.synchronize(); t0 = time.perf_counter()
        idx = torch.randint(0, len(x), (bs,), device=dev); xb = x[idx]
        if cl: xb = xb.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(m(xb), y[idx])
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    torch.cuda.synchronize(); return steps * bs / (time.perf_counter() - t0)
base = run(False, False); fast = run(True, True)
print(f"resnet cifar-shaped: fp32 {base:,.0f} samples/s, bf16+channels_last {fast:,.0f} samples/s, ratio {fast/base:.2f}")
PYEOF
  for lanes in 1 4; do
    gpus=$("$PY" -c "print(1.0/$lanes)")
    start=$(date +%s.%N)
    SWEEPS_HOME=$(mktemp -d) .venv/bin/sweeps run conf/quickstart.yaml --name "gpu-$lanes" \
      --set budget.trials=16 --set "budget.parallel=$lanes" --set "resources.gpus_per_worker=$gpus" \
      --set resources.cpus_per_worker=1 --set trainer.epochs=10 > /dev/null
    end=$(date +%s.%N)
    "$PY" -c "s=$end-$start; print(f'{$lanes} lane(s) x {$gpus:.2f} GPU: 16 trials in {s:.1f} s = {16*3600/s:,.0f} trials/hour')"
  done
} 2>&1 | tee "$out"
