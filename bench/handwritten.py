"""The anchor for start-up: one trial written by hand as a Ray Train run, the way a user would
without sweeps (ray.init, a TorchTrainer, one `ray.train.report` per epoch). Run it as a whole
process and time that: `python bench/handwritten.py EPOCHS [PARAMS_JSON]`.

The same model, data and hyper-parameters as bench/startup.py's trial (PARAMS_JSON: its lr,
hidden, dropout, batch_size), no MLflow, no Optuna.
"""

from __future__ import annotations

import json
import sys


def train_fn(config: dict) -> None:
    import ray.train
    import torch
    import torch.nn.functional as F  # noqa: N812
    from sklearn.datasets import load_digits
    from torch import nn

    torch.manual_seed(0)
    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    n_val = round(len(x) * 0.2)
    xv, yv, xt, yt = x[perm[:n_val]], y[perm[:n_val]], x[perm[n_val:]], y[perm[n_val:]]
    h, p, bs = config["hidden"], config["dropout"], config["batch_size"]
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(64, h), nn.ReLU(), nn.Dropout(p),
        nn.Linear(h, h), nn.ReLU(), nn.Dropout(p), nn.Linear(h, 10),
    )  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(len(xt), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(order), bs):
            b = order[i : i + bs]
            loss = F.cross_entropy(model(xt[b]), yt[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xv).argmax(1) == yv).float().mean().item()
        ray.train.report({"epoch": epoch + 1, "val_accuracy": acc})


def main() -> None:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    params = {"lr": 0.005, "hidden": 128, "dropout": 0.1, "batch_size": 64}
    if len(sys.argv) > 2:
        params.update(json.loads(sys.argv[2]))
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    TorchTrainer(
        train_fn,
        train_loop_config={**params, "epochs": epochs},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name=f"anchor-{__import__('uuid').uuid4().hex[:6]}"),
    ).fit()


if __name__ == "__main__":
    main()
