"""The anchor for start-up: one trial written by hand as a Ray Train run, the way a user would
without sweeps (ray.init, a TorchTrainer, one `ray.train.report` per epoch). Run it as a whole
process and time that: `python bench/handwritten.py EPOCHS`.

Same model, data, split and hyper-parameters as bench/startup.py's sweep, no MLflow, no Optuna.
"""

from __future__ import annotations

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
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(128, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10),
    )  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(len(xt), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(order), 64):
            b = order[i : i + 64]
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
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    TorchTrainer(
        train_fn,
        train_loop_config={"lr": 0.005, "epochs": epochs},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name=f"anchor-{__import__('uuid').uuid4().hex[:6]}"),
    ).fit()


if __name__ == "__main__":
    main()
