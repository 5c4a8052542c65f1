"""How often a two-rank DDP job on gloo aborts as Python exits, side by side in one run: a script
that ends with `dist.destroy_process_group()` alone (the PyTorch tutorial's ending) against one
that first frees the DDP model and optimizer (the ending of examples/any_script/train.py and
examples/aiplatform_trainer). Runs alternate; each is two real processes on loopback.

Why: with torch 2.x, DDP keeps the process group, and so gloo's worker threads, alive after
destroy_process_group(); a worker that frees its last work item while the interpreter is
finalizing takes the GIL and std::terminate()s the process (pytorch/pytorch#190489).

    .venv/bin/python bench/gloo_exit.py [--runs 40] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.results import publish  # noqa: E402

SCRIPT = """
import gc, sys
import torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(),
                                                          nn.Linear(64, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(50):
    loss = nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
if sys.argv[1] == "free":
    del model, opt
    gc.collect()
dist.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_job(script: str, ending: str) -> list[int]:
    """Both ranks' exit codes."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port())}
    env.update(WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, script, ending],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for r in range(2)
    ]
    return [p.wait(timeout=120) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40, help="jobs per ending")
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch

    endings = ("destroy", "free")
    aborted = dict.fromkeys(endings, 0)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        script = str(Path(tmp) / "ddp_exit.py")
        Path(script).write_text(SCRIPT)
        for _ in range(a.runs):
            for ending in endings:
                codes = one_job(script, ending)
                aborted[ending] += any(c == -6 for c in codes)
                assert all(c in (0, -6) for c in codes), (ending, codes)
    rate = {e: aborted[e] / a.runs for e in endings}
    lines = [
        f"### gloo_exit ({date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {a.runs} two-rank jobs per ending, alternated, "
        f"{time.monotonic() - t0:.0f} s)",
        "",
        "| script ending | jobs with a rank killed by SIGABRT at exit |",
        "|---|---|",
        f"| destroy_process_group() only | {aborted['destroy']}/{a.runs} ({rate['destroy']:.0%}) |",
        f"| del model, opt; gc.collect(); destroy_process_group() | "
        f"{aborted['free']}/{a.runs} ({rate['free']:.0%}) |",
    ]
    publish("\n".join(lines), a.out, "gloo_exit")


if __name__ == "__main__":
    main()
