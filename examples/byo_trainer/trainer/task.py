"""A Cloud ML Engine-style training package, ported to sweeps' contract.

`train(config)` runs on every Ray Train worker of a trial: it builds its own model, shards the
data by rank, reports once per epoch (every rank) and resumes from `sweeps.get_checkpoint()`.
Only `sweeps` and torch are needed; the package is shipped to the workers by `code_dir`.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.nn.functional as F  # noqa: N812
from sklearn.datasets import load_digits
from torch import nn

import sweeps


def _data(seed: int = 0) -> tuple[torch.Tensor, ...]:
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_val = len(x) // 5
    return x[perm[n_val:]], y[perm[n_val:]], x[perm[:n_val]], y[perm[:n_val]]


def train(config: dict) -> dict:
    ctx = sweeps.context()
    x_tr, y_tr, x_va, y_va = _data()
    torch.manual_seed(ctx.seed)
    model = nn.Sequential(
        nn.Linear(64, int(config["units"])), nn.ReLU(), nn.Linear(int(config["units"]), 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=float(config["lr"]), momentum=0.9)
    start = 0
    ckpt = sweeps.get_checkpoint()
    if ckpt:
        state = torch.load(os.path.join(ckpt, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"]
    if ctx.world_size > 1:
        from ray.train.torch import prepare_model

        model = prepare_model(model)
    for epoch in range(start, int(config["epochs"])):
        g = torch.Generator().manual_seed(ctx.seed + epoch)
        perm = torch.randperm(len(x_tr), generator=g)
        per = len(perm) // ctx.world_size
        shard = perm[ctx.rank * per : (ctx.rank + 1) * per]  # disjoint, equal-sized
        model.train()
        for i in range(0, len(shard), 32):
            b = shard[i : i + 32]
            loss = F.cross_entropy(model(x_tr[b]), y_tr[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(x_va).argmax(1) == y_va).float().mean().item()
        print(f"epoch {epoch + 1}: val_accuracy={acc:.4f}")
        with tempfile.TemporaryDirectory() as d:
            if ctx.rank == 0:
                base = getattr(model, "module", model)
                torch.save(
                    {"model": base.state_dict(), "opt": opt.state_dict(), "epoch": epoch + 1},
                    os.path.join(d, "state.pt"),
                )
            sweeps.report(
                {"val_accuracy": acc, "train_loss": loss.item()},
                checkpoint_dir=d if ctx.rank == 0 else None,
            )
    # The model goes to MLflow (torch.export, traced on this example input: no pickle).
    return {
        "val_accuracy": acc,
        "model": getattr(model, "module", model),
        "input_example": x_va[:4].numpy(),
    }
