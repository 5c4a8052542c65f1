"""Training samples/s of our loop (trainer/loop.py) vs a bare PyTorch loop, same model, data,
batch size and thread count, measured side by side in one process (1 worker).

    .venv/bin/python bench/trainer_throughput.py [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402, N812

from sweeps.worker import runtime  # noqa: E402
from trainer import loop  # noqa: E402
from trainer.models import build_model  # noqa: E402


def bare(ds, model_name: str, arch: dict, epochs: int, bs: int) -> float:
    """The loop a user would write: same permutation, gather, forward, backward, step."""
    torch.manual_seed(0)
    model = build_model(model_name, ds.input_shape, 10, **arch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rates = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(len(ds.x_train), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(perm), bs):
            b = perm[i : i + bs]
            loss = F.cross_entropy(model(ds.x_train[b]), ds.y_train[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        rates.append(len(perm) / (time.perf_counter() - t0))
    return statistics.median(rates[1:])


def ours(model_name: str, dataset: str, arch: dict, epochs: int, bs: int, data_dir=None) -> float:
    rates: list[float] = []
    real_report = runtime.report

    def capture(metrics, *, checkpoint_dir=None):
        rates.append(metrics["samples_per_s"])
        return real_report(metrics, checkpoint_dir=checkpoint_dir)

    runtime.report = capture
    loop.runtime.report = capture
    try:
        runtime._set_context(
            runtime.TrialContext(
                rank=0,
                world_size=1,
                local_rank=0,
                device=torch.device("cpu"),
                data_dir=data_dir,
                trial_number=0,
                seed=0,
                params={},
                checkpoint_every=0,
            )
        )
        loop.train(
            {
                "model": model_name,
                "dataset": dataset,
                "data_dir": data_dir,
                "epochs": epochs,
                "batch_size": bs,
                "optimizer": "adamw",
                "lr": 1e-3,
                **arch,
            }
        )
    finally:
        runtime.report = real_report
        loop.runtime.report = real_report
        runtime._set_context(None)
    return statistics.median(rates[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a 1-CPU worker)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases = [
        ("digits", "mlp", {"hidden": 256, "layers": 2}, 64, 12),
        ("digits", "cnn", {"channels": 32, "hidden": 128}, 64, 6),
    ]
    lines = [
        f"### trainer_throughput ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch threads {args.threads}, CPU)",
        "",
        "| data | model | batch | bare samples/s | ours samples/s | ours / bare |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, model, arch, bs, epochs in cases:
        ds, _ = loop.dataset({"dataset": dataset}, torch.device("cpu"))
        # Interleave the two, twice, so drift on a shared machine hits both alike.
        b1 = bare(ds, model, arch, epochs, bs)
        o1 = ours(model, dataset, arch, epochs, bs)
        b2 = bare(ds, model, arch, epochs, bs)
        o2 = ours(model, dataset, arch, epochs, bs)
        b, o = (b1 + b2) / 2, (o1 + o2) / 2
        lines.append(f"| {dataset} | {model} | {bs} | {b:,.0f} | {o:,.0f} | **{o / b:.3f}** |")
    lines += ["", "Target: ours / bare >= 0.95. Median of epochs 2..N, two interleaved rounds."]
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "trainer_throughput")


if __name__ == "__main__":
    main()
